/* The mbedTLS 2.28 configuration of the board runtimes (scripts/build-mbedtls.sh builds
 * Debian's mbedTLS source package with it, for each board triple; it is installed as the
 * prefix's mbedtls/config.h, so Kestrel's sources and the library agree on it).
 *
 * What the board uses of mbedTLS (rpc/src/tls_mbedtls.cpp, rpc/src/crypto_mbedtls.cpp) and
 * nothing more: a TLS 1.2 client (the tracker is the server) with the six suites of
 * docs/security.md, ECDHE-ECDSA and ECDHE-RSA with AES-GCM and ChaCha20-Poly1305 over
 * X25519, P-256 and P-384; the extended master secret, which the client requires; the key
 * export the TLS exporter (the token proof's session binding) is computed from; X.509
 * certificate parsing (PEM) and chain verification for --tls-ca, with key usage and
 * validity dates checked; HMAC-SHA256 and SHA-256 (frame MACs, hashes). SHA-384 (from
 * the SHA-512 module) is there for the AES-256-GCM-SHA384 suites' PRF and for SHA-384
 * certificate signatures. Random bytes come from getrandom through the RNG callback the
 * runtime installs (mbedtls_ssl_conf_rng), so neither the entropy module nor a DRBG is
 * built. Left out: the TLS server, TLS 1.0/1.1, DTLS, renegotiation, session tickets,
 * CBC suites, RSA key exchange, PSK, every other cipher and hash, the self-tests, the
 * test certificates, error strings, version information, debug output, sockets.
 *
 * Written for Kestrel from the option descriptions of mbedTLS's include/mbedtls/config.h.
 * Changing this file changes the stamp of scripts/build-mbedtls.sh, which then rebuilds.
 */
#ifndef MBEDTLS_CONFIG_H
#define MBEDTLS_CONFIG_H

/* System support. */
#define MBEDTLS_HAVE_ASM          /* bignum multiply in assembly where bn_mul.h has it */
#define MBEDTLS_HAVE_TIME         /* time() */
#define MBEDTLS_HAVE_TIME_DATE    /* certificate validity dates are checked */
#define MBEDTLS_FS_IO             /* mbedtls_x509_crt_parse_file (--tls-ca) */

/* TLS: a TLS 1.2 client with ECDHE key exchange. */
#define MBEDTLS_SSL_TLS_C
#define MBEDTLS_SSL_CLI_C
#define MBEDTLS_SSL_PROTO_TLS1_2
#define MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA_ENABLED
#define MBEDTLS_KEY_EXCHANGE_ECDHE_RSA_ENABLED
#define MBEDTLS_SSL_EXTENDED_MASTER_SECRET
#define MBEDTLS_SSL_EXPORT_KEYS   /* the master secret and randoms for the TLS exporter */
#define MBEDTLS_SSL_ALL_ALERT_MESSAGES
#define MBEDTLS_SSL_KEEP_PEER_CERTIFICATE
/* Only the suites the client offers are in the preference list. */
#define MBEDTLS_SSL_CIPHERSUITES                                                             \
  MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, \
  MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,                                     \
  MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,                                       \
  MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256

/* Ciphers: AES-GCM and ChaCha20-Poly1305 (AEAD only). */
#define MBEDTLS_CIPHER_C
#define MBEDTLS_AES_C
#define MBEDTLS_AES_FEWER_TABLES  /* 2 KB of AES tables instead of 8 KB, built at run time */
#define MBEDTLS_GCM_C
#define MBEDTLS_CHACHA20_C
#define MBEDTLS_POLY1305_C
#define MBEDTLS_CHACHAPOLY_C

/* Hashes and MACs: SHA-256 (HMAC through the md layer), SHA-384 (SHA-512 module). */
#define MBEDTLS_MD_C
#define MBEDTLS_SHA256_C
#define MBEDTLS_SHA512_C

/* Public keys: ECDH over X25519, P-256, P-384; ECDSA and RSA (PKCS#1 v1.5) signatures. */
#define MBEDTLS_BIGNUM_C
#define MBEDTLS_ECP_C
#define MBEDTLS_ECP_DP_SECP256R1_ENABLED
#define MBEDTLS_ECP_DP_SECP384R1_ENABLED
#define MBEDTLS_ECP_DP_CURVE25519_ENABLED
#define MBEDTLS_ECP_NIST_OPTIM    /* fast reduction modulo the NIST primes */
/* No DRBG of ECP's own: the secret-key operation (ECDH) is blinded with the RNG that TLS
 * passes it (mbedtls_ssl_conf_rng); ECDSA verification works on public data. */
#define MBEDTLS_ECP_NO_INTERNAL_RNG
#define MBEDTLS_ECDH_C
#define MBEDTLS_ECDSA_C
#define MBEDTLS_RSA_C
#define MBEDTLS_PKCS1_V15
#define MBEDTLS_PK_C
#define MBEDTLS_PK_PARSE_C

/* X.509: certificates in PEM or DER, chains verified against --tls-ca. */
#define MBEDTLS_X509_USE_C
#define MBEDTLS_X509_CRT_PARSE_C
#define MBEDTLS_X509_CHECK_KEY_USAGE
#define MBEDTLS_X509_CHECK_EXTENDED_KEY_USAGE
#define MBEDTLS_PEM_PARSE_C
#define MBEDTLS_BASE64_C
#define MBEDTLS_OID_C
#define MBEDTLS_ASN1_PARSE_C
#define MBEDTLS_ASN1_WRITE_C      /* ECDSA signatures are read through it */

#include "mbedtls/check_config.h"

#endif /* MBEDTLS_CONFIG_H */
