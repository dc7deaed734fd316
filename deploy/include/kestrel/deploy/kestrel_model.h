/* A whole model on a board: the C interface of libkestrel_model, which `kestrel export
 * --model` ships beside the model's kernel library. It opens an export folder
 * (model.kprog, the model lowered; model.weights, its weights packed for the target,
 * which the programs of a bucketed export share; libkestrel_kernels.so) and runs the
 * model on the runtime's thread pool, its activations in one arena allocated at open. No ONNX, no
 * protobuf, no Python: the C library, and the C++ runtime inside the library itself.
 *
 *   char error[256];
 *   kestrel_model* m = kestrel_model_open("out", 4, error, sizeof error);
 *   if (!m) { fprintf(stderr, "%s\n", error); return 1; }
 *   const void* inputs[] = {image};        // per input, in kestrel_model_input_* order
 *   void* outputs[] = {logits};            // per output, room for its elements
 *   if (kestrel_model_run(m, inputs, outputs) != 0) fprintf(stderr, "%s\n", kestrel_model_error(m));
 *   kestrel_model_close(m);
 *
 * Tensors are row-major in their shape: float for float values, int64_t for integer and
 * boolean ones (0/1). One run at a time per model; separate models are independent. */
#ifndef KESTREL_MODEL_H
#define KESTREL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KESTREL_MODEL_API __attribute__((visibility("default")))
#else
#define KESTREL_MODEL_API
#endif

typedef struct kestrel_model kestrel_model;

/* Element types of inputs and outputs. */
enum { KESTREL_MODEL_FLOAT32 = 0, KESTREL_MODEL_INT64 = 1 };

/* Opens the export folder `dir` (its model.kprog and model.weights) with a pool of
 * `threads` threads (>= 1). NULL on failure, with the reason in error[0..error_size) (a
 * missing or corrupt program or weights file, naming it; a weights file of another
 * export; a kernel library that does not load; an operator this runtime cannot run). */
KESTREL_MODEL_API kestrel_model* kestrel_model_open(const char* dir, int threads, char* error, size_t error_size);
/* The same for one program of the folder: `program` is its file name, e.g. a bucket's
 * "model.seq=32.kprog" when the model was exported at several sizes of its symbols
 * (NULL: model.kprog). */
KESTREL_MODEL_API kestrel_model* kestrel_model_open_program(const char* dir, const char* program, int threads, char* error,
                                                            size_t error_size);
KESTREL_MODEL_API void kestrel_model_close(kestrel_model* model);

KESTREL_MODEL_API int kestrel_model_input_count(const kestrel_model* model);
KESTREL_MODEL_API int kestrel_model_output_count(const kestrel_model* model);
/* The name of input/output `i` (valid while the model is open); NULL when out of range. */
KESTREL_MODEL_API const char* kestrel_model_input_name(const kestrel_model* model, int i);
KESTREL_MODEL_API const char* kestrel_model_output_name(const kestrel_model* model, int i);
/* KESTREL_MODEL_FLOAT32 or KESTREL_MODEL_INT64; -1 when out of range. */
KESTREL_MODEL_API int kestrel_model_input_type(const kestrel_model* model, int i);
KESTREL_MODEL_API int kestrel_model_output_type(const kestrel_model* model, int i);
/* The rank of input/output `i`, its dimensions written to dims[0..min(rank, max_dims));
 * -1 when out of range. */
KESTREL_MODEL_API int kestrel_model_input_shape(const kestrel_model* model, int i, int64_t* dims, int max_dims);
KESTREL_MODEL_API int kestrel_model_output_shape(const kestrel_model* model, int i, int64_t* dims, int max_dims);

/* Runs the model: inputs[i] holds input i, outputs[i] has room for output i (both in
 * the order and types above). 0 on success; -1 on failure, with the reason in
 * kestrel_model_error() (a kernel that fails, a step that cannot run). */
KESTREL_MODEL_API int kestrel_model_run(kestrel_model* model, const void* const* inputs, void* const* outputs);
/* Seconds the last successful run took, steps only (not the copies in and out). */
KESTREL_MODEL_API double kestrel_model_last_run_seconds(const kestrel_model* model);
/* The reason of the last failure ("" if none); valid until the next call. */
KESTREL_MODEL_API const char* kestrel_model_error(const kestrel_model* model);

#ifdef __cplusplus
}
#endif

#endif
