/* kestrel-model-run: the example program `kestrel export --model` ships. Runs an export
 * folder's model with libkestrel_model (kestrel_model.h) and reports its latency.
 *
 *   kestrel-model-run DIR [--program FILE] [--threads N] [--repeat R] [--input NAME=FILE]... [--outputs OUTDIR]
 *
 * --program picks one program of the folder (a bucket's model.seq=32.kprog); default model.kprog.
 * Inputs are raw files in the input's type and shape, little-endian (numpy:
 * array.astype(np.float32).tofile(FILE)); an input without a file gets values from a fixed
 * pseudo-random sequence (floats in [-1, 1), integers 0). With --outputs each output is
 * written raw to OUTDIR/<index>.bin, and its name, type and shape are printed.
 * Build: cc kestrel_model_run.c -o kestrel-model-run -L. -lkestrel_model -Wl,-rpath,'$ORIGIN' */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kestrel_model.h"

static size_t elements_of(const int64_t* dims, int rank) {
  size_t n = 1;
  for (int d = 0; d < rank; ++d) n *= (size_t)dims[d];
  return n;
}

static int usage(void) {
  fprintf(stderr,
          "usage: kestrel-model-run DIR [--program FILE] [--threads N] [--repeat R] [--input NAME=FILE]... [--outputs OUTDIR]\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0) return usage();
  const char* dir = argv[1];
  int threads = 1, repeat = 10;
  const char* out_dir = NULL;
  const char* program = NULL;
  const char* files[64] = {0};
  const char* names[64] = {0};
  int given = 0;
  for (int a = 2; a < argc; ++a) {
    if (strcmp(argv[a], "--threads") == 0 && a + 1 < argc) {
      threads = atoi(argv[++a]);
    } else if (strcmp(argv[a], "--repeat") == 0 && a + 1 < argc) {
      repeat = atoi(argv[++a]);
    } else if (strcmp(argv[a], "--program") == 0 && a + 1 < argc) {
      program = argv[++a];
    } else if (strcmp(argv[a], "--outputs") == 0 && a + 1 < argc) {
      out_dir = argv[++a];
    } else if (strcmp(argv[a], "--input") == 0 && a + 1 < argc && given < 64) {
      char* spec = argv[++a];
      char* eq = strrchr(spec, '=');
      if (!eq) return usage();
      *eq = '\0';
      names[given] = spec;
      files[given++] = eq + 1;
    } else {
      return usage();
    }
  }
  if (threads < 1 || repeat < 1) return usage();

  char error[1024];
  kestrel_model* model = kestrel_model_open_program(dir, program, threads, error, sizeof error);
  if (!model) {
    fprintf(stderr, "kestrel-model-run: %s\n", error);
    return 1;
  }
  const int n_in = kestrel_model_input_count(model), n_out = kestrel_model_output_count(model);
  void** inputs = calloc((size_t)n_in + 1, sizeof(void*));
  void** outputs = calloc((size_t)n_out + 1, sizeof(void*));
  size_t* out_bytes = calloc((size_t)n_out + 1, sizeof(size_t));
  int status = 1;
  uint32_t state = 12345;
  for (int i = 0; i < n_in; ++i) {
    int64_t dims[16];
    const int rank = kestrel_model_input_shape(model, i, dims, 16);
    const size_t n = elements_of(dims, rank);
    const int is_float = kestrel_model_input_type(model, i) == KESTREL_MODEL_FLOAT32;
    const size_t bytes = n * (is_float ? sizeof(float) : sizeof(int64_t));
    inputs[i] = calloc(n + 1, is_float ? sizeof(float) : sizeof(int64_t));
    const char* file = NULL;
    for (int g = 0; g < given; ++g) {
      if (strcmp(names[g], kestrel_model_input_name(model, i)) == 0) file = files[g];
    }
    if (file) {
      FILE* f = fopen(file, "rb");
      if (!f) {
        fprintf(stderr, "kestrel-model-run: cannot read %s\n", file);
        goto done;
      }
      const size_t got = fread(inputs[i], 1, bytes + 1, f);
      fclose(f);
      if (got != bytes) {
        fprintf(stderr, "kestrel-model-run: %s holds %zu bytes; input %s takes %zu\n", file, got,
                kestrel_model_input_name(model, i), bytes);
        goto done;
      }
    } else if (is_float) {
      float* x = inputs[i];
      for (size_t k = 0; k < n; ++k) {
        state = state * 1664525u + 1013904223u;
        x[k] = (float)(state >> 8) / 8388608.0f - 1.0f;
      }
    }
  }
  for (int i = 0; i < n_out; ++i) {
    int64_t dims[16];
    const int rank = kestrel_model_output_shape(model, i, dims, 16);
    const size_t n = elements_of(dims, rank);
    out_bytes[i] = n * (kestrel_model_output_type(model, i) == KESTREL_MODEL_FLOAT32 ? sizeof(float) : sizeof(int64_t));
    outputs[i] = malloc(out_bytes[i] + 1);
  }
  double best = 1e30, total = 0;
  for (int r = 0; r <= repeat; ++r) {  /* run 0 is a warm-up */
    if (kestrel_model_run(model, (const void* const*)inputs, outputs) != 0) {
      fprintf(stderr, "kestrel-model-run: %s\n", kestrel_model_error(model));
      goto done;
    }
    const double s = kestrel_model_last_run_seconds(model);
    if (r > 0) {
      total += s;
      if (s < best) best = s;
    }
  }
  printf("model: %s%s%s, %d input%s, %d output%s, %d thread%s\n", dir, program ? "/" : "", program ? program : "", n_in,
         n_in == 1 ? "" : "s", n_out, n_out == 1 ? "" : "s", threads, threads == 1 ? "" : "s");
  printf("latency: mean %.3f ms, best %.3f ms over %d runs\n", total / repeat * 1e3, best * 1e3, repeat);
  for (int i = 0; i < n_out; ++i) {
    int64_t dims[16];
    const int rank = kestrel_model_output_shape(model, i, dims, 16);
    printf("output %d %s %s [", i, kestrel_model_output_name(model, i),
           kestrel_model_output_type(model, i) == KESTREL_MODEL_FLOAT32 ? "float32" : "int64");
    for (int d = 0; d < rank; ++d) printf("%s%lld", d ? "," : "", (long long)dims[d]);
    printf("]\n");
    if (out_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%d.bin", out_dir, i);
      FILE* f = fopen(path, "wb");
      if (!f || fwrite(outputs[i], 1, out_bytes[i], f) != out_bytes[i]) {
        fprintf(stderr, "kestrel-model-run: cannot write %s\n", path);
        if (f) fclose(f);
        goto done;
      }
      fclose(f);
    }
  }
  status = 0;
done:
  for (int i = 0; i < n_in; ++i) free(inputs[i]);
  for (int i = 0; i < n_out; ++i) free(outputs[i]);
  free(inputs);
  free(outputs);
  free(out_bytes);
  kestrel_model_close(model);
  return status;
}
