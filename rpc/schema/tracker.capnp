# The Kestrel tracker protocol: every frame exchanged between the tracker and a
# device or client is one serialized `Frame`. This file (with session.capnp) is the
# single source of the protocol.
#
# Framing (rpc/framing.cpp): a 4-byte little-endian length, then that many bytes of a
# Cap'n Proto flat-array message. Lengths are multiples of 8, non-zero, and at most the
# receiver's maximum frame size.
#
# Handshake (rpc/handshake.cpp), started by the side that connects:
#   peer    -> tracker  hello      protocol version, role, 32-byte nonce
#   tracker -> peer     challenge  its version, 32-byte nonce, whether a token is required
#   peer    -> tracker  authProof  HMAC-SHA256(token, "kestrel-auth-v1 peer"    | role | nonceP | nonceT)
#   tracker -> peer     welcome    HMAC-SHA256(token, "kestrel-auth-v1 tracker" | role | nonceT | nonceP)
# or `failure` at any step, after which the tracker closes the connection. The token
# itself never crosses the wire.

@0x88739612cc607415;

$import "/capnp/c++.capnp".namespace("kestrel::wire");

# Bumped on any change that an older peer cannot understand; checked at handshake.
const protocolVersion :UInt32 = 2;  # 2: BatchProgress, MeasureResult.machine

enum Role {
  device @0;
  client @1;
}

# Why something failed; tells the receiver how to react.
enum FailureCode {
  protocolError @0;    # malformed or unexpected frame
  versionMismatch @1;
  authFailed @2;
  timeout @3;          # request waited past its timeout
  cancelled @4;
  noSuchLease @5;
  deviceLost @6;       # the device of a lease disconnected or missed heartbeats
  shuttingDown @7;
  overloaded @8;
  badRequest @9;
}

struct Failure {
  code @0 :FailureCode;
  message @1 :Text;
}

struct Hello {
  protocolVersion @0 :UInt32;
  role @1 :Role;
  nonce @2 :Data;
  name @3 :Text;             # free-form peer description, e.g. "kestrel-device 0.1.0 rpi4-a"
  softwareVersion @4 :Text;
}

struct Challenge {
  protocolVersion @0 :UInt32;
  nonce @1 :Data;
  authRequired @2 :Bool;
}

struct AuthProof {
  mac @0 :Data;              # empty when the peer has no token
}

struct Welcome {
  connectionId @0 :UInt64;
  mac @1 :Data;              # the tracker's proof; empty when no token is configured
  heartbeatIntervalMs @2 :UInt32;
  heartbeatMisses @3 :UInt32;
  acceptsReports @4 :Bool;   # the tracker shows tuning sessions: clients may send sessionReport
}

struct CacheInfo {
  level @0 :UInt8;
  kind @1 :Text;             # "data", "instruction", "unified"
  sizeBytes @2 :UInt64;
  lineBytes @3 :UInt32;
}

# What a device reports about itself when it registers.
struct DeviceInfo {
  name @0 :Text;             # unique per device instance, e.g. "rpi4-a" or "host:pid"
  hostname @1 :Text;
  os @2 :Text;               # e.g. "Linux 6.1.0-18-arm64"
  arch @3 :Text;             # uname machine, e.g. "aarch64"
  triple @4 :Text;           # the target triple the runtime was built for
  cpuModel @5 :Text;
  cores @6 :UInt32;
  caches @7 :List(CacheInfo);
  memoryBytes @8 :UInt64;
  cpuFeatures @9 :List(Text);
  runtimeVersion @10 :Text;
  abiVersion @11 :UInt32;    # kernel ABI the runtime implements (0: a runtime too old to say)
  gpus @12 :List(GpuInfo);   # CUDA and OpenCL devices the runtime found
  gpuNotes @13 :List(Text);  # why a backend found nothing, e.g. "no CUDA driver (...)"
  cpuPart @14 :Text;         # ARM: "implementer:part" from /proc/cpuinfo ("0x41:0xd08"), for -mcpu
}

# One CUDA or OpenCL device of a registered device runtime.
struct GpuInfo {
  backend @0 :Text;          # "cuda" or "opencl"
  index @1 :UInt32;          # position among the runtime's devices of that backend
  name @2 :Text;
  vendor @3 :Text;
  version @4 :Text;          # CUDA: compute capability "sm_90"; OpenCL: "OpenCL C 1.2"
  driver @5 :Text;           # driver / platform version
  memoryBytes @6 :UInt64;
  computeUnits @7 :UInt32;   # multiprocessors or compute units
  maxThreadsPerGroup @8 :UInt32;   # threads per block / work-items per work-group
  maxSharedBytes @9 :UInt64;       # shared memory per block / local memory per work-group
  l2Bytes @10 :UInt64;       # 0 when unknown
}

struct Register {
  key @0 :Text;
  info @1 :DeviceInfo;
}

struct Registered {
  deviceId @0 :UInt64;
}

struct Heartbeat {
  seq @0 :UInt64;
}

struct RequestDevice {
  requestId @0 :UInt64;      # chosen by the client, unique on its connection
  key @1 :Text;
  priority @2 :Int32;        # higher first; FIFO within a priority
  timeoutMs @3 :UInt32;      # 0: wait forever
}

struct CancelRequest {
  requestId @0 :UInt64;
}

struct Grant {
  requestId @0 :UInt64;
  leaseId @1 :UInt64;
  deviceId @2 :UInt64;
  info @3 :DeviceInfo;
}

struct RequestFailed {
  requestId @0 :UInt64;
  failure @1 :Failure;
}

struct Release {
  leaseId @0 :UInt64;
}

# To a device: a lease on it started. To a client and a device: a lease ended.
struct LeaseStarted {
  leaseId @0 :UInt64;
  holder @1 :Text;
}

struct LeaseEnded {
  leaseId @0 :UInt64;
  released @1 :Bool;         # true: ended by the holder's release; false: see failure
  failure @2 :Failure;
}

# Session traffic between a lease holder and its device. The tracker checks the lease
# and forwards `payload` untouched; the payload is a session.capnp `SessionMessage`.
struct Relay {
  leaseId @0 :UInt64;
  payload @1 :Data;
}

struct SummaryRequest {
  requestId @0 :UInt64;
}

struct KeySummary {
  key @0 :Text;
  free @1 :UInt32;
  busy @2 :UInt32;
  queued @3 :UInt32;
}

struct DeviceSummary {
  deviceId @0 :UInt64;
  key @1 :Text;
  info @2 :DeviceInfo;
  address @3 :Text;
  busy @4 :Bool;
  leaseId @5 :UInt64;
  leaseHolder @6 :Text;      # the holder's hello name and address
  connectedMs @7 :UInt64;    # how long the device has been connected
}

struct Summary {
  requestId @0 :UInt64;
  trackerVersion @1 :Text;
  uptimeMs @2 :UInt64;
  keys @3 :List(KeySummary);
  devices @4 :List(DeviceSummary);
  clients @5 :UInt32;
}

# A tuning session's progress on one job (op + workload), sent by a client after each
# batch when the tracker's welcome said acceptsReports. Counts are cumulative; each
# report is one point of the job's best-so-far curve (trials, elapsedMs, bestGflops).
struct StatusCount {
  status @0 :Text;           # a measurement status: "compile_error", "timeout", "crash", ...
  count @1 :UInt32;
}

struct SessionReport {
  sessionId @0 :Text;        # chosen by the client, unique among its sessions
  job @1 :UInt32;            # the job's index within the session
  label @2 :Text;            # the job as shown, e.g. "gemm m=512 n=512 k=512"
  op @3 :Text;
  workload @4 :Text;
  strategy @5 :Text;
  target @6 :Text;           # the compile target, e.g. "x86_64-linux-gnu avx2"
  key @7 :Text;              # the device key measured on
  phase @8 :Text;            # "tuning", "final", "done"
  trials @9 :UInt32;         # measured so far, earlier sessions included
  budget @10 :UInt32;        # the trial budget of the job
  thisSession @11 :UInt32;   # measured by this session
  bestGflops @12 :Float64;   # best so far (0: nothing valid yet)
  defaultGflops @13 :Float64;
  bestConfig @14 :Text;
  elapsedMs @15 :UInt64;     # since the job started
  failures @16 :List(StatusCount);  # this session's failed measurements by status
  finished @17 :Bool;        # the job's last report
  # The job's final round (in its last report): the recommendation's re-measured
  # GFLOP/s and speed-up over the default with its 95% interval, and the verdict.
  finalGflops @18 :Float64;
  finalSpeedup @19 :Float64;
  finalSpeedupLow @20 :Float64;
  finalSpeedupHigh @21 :Float64;
  verdict @22 :Text;
  outcome @23 :Text;         # last report: "done", "interrupted", "failed"
  etaMs @24 :UInt64;         # estimated time left (0: unknown)
  message @25 :Text;         # outcome "failed" (or "interrupted" by an abort): why
}

struct Frame {
  union {
    hello @0 :Hello;
    challenge @1 :Challenge;
    authProof @2 :AuthProof;
    welcome @3 :Welcome;
    failure @4 :Failure;
    register @5 :Register;
    registered @6 :Registered;
    heartbeat @7 :Heartbeat;
    heartbeatAck @8 :Heartbeat;
    requestDevice @9 :RequestDevice;
    cancelRequest @10 :CancelRequest;
    grant @11 :Grant;
    requestFailed @12 :RequestFailed;
    release @13 :Release;
    leaseStarted @14 :LeaseStarted;
    leaseEnded @15 :LeaseEnded;
    relay @16 :Relay;
    summaryRequest @17 :SummaryRequest;
    summary @18 :Summary;
    sessionReport @19 :SessionReport;
  }
}
