/*
 * model.h: a tinylm model (samples/tinylm/MODEL.md) on the app's own Vulkan device.
 *
 * Gpu: the app's instance, device and queue, adopted into a polysketch context.
 * Model: the weights in one device buffer, the activations, the app's compute pipelines (embedding,
 * LayerNorm, matmul with GELU / residual epilogues, RoPE), one PskAttention and one decode state
 * per layer. Every function returns 0 on success and writes a message into `err` otherwise.
 */
#ifndef TINYLM_MODEL_H
#define TINYLM_MODEL_H

#include <polysketch/polysketch_vulkan.h>

#include "st.h"

/* Exit codes of the app. */
#define TINYLM_EXIT_FAILED 1   /* a check did not pass, or the device failed */
#define TINYLM_EXIT_BAD_INPUT 2 /* bad model / data file or bad command line */

typedef enum AttentionKind { ATTENTION_SOFTMAX = 0, ATTENTION_POLYNOMIAL = 1, ATTENTION_POLYSKETCH = 2 } AttentionKind;

typedef struct ModelConfig {
    uint32_t vocab, dModel, nLayers, nHeads, headDim;
    double ropeBase;
    AttentionKind attention;
    uint32_t degree;
    float scale;
    int learnedSketch; /* polysketch: learned (1) or random (0) */
    uint32_t sketchSize, blockSize;
    int localExact;
    char task[64];
    uint32_t trainContext;
} ModelConfig;

typedef struct GpuOptions {
    const char* device; /* NULL: the best device; else a decimal index */
    int validate;       /* enable the validation layer (and synchronization validation); any message fails */
} GpuOptions;

typedef struct Gpu Gpu;
typedef struct Model Model;

int gpuCreate(const GpuOptions* options, Gpu** gpu, StError* err);
void gpuDestroy(Gpu* gpu);
/** Validation messages seen so far (with --validate). */
uint32_t gpuValidationMessages(const Gpu* gpu);
const char* gpuDeviceName(const Gpu* gpu);
const char* gpuDriverInfo(const Gpu* gpu);
/** With TINYLM_PROFILE=1: prints the GPU time of each kind of work (timestamps after each dispatch). */
void gpuPrintProfile(const Gpu* gpu);

/** Reads and checks the metadata of an open model file (MODEL.md); errors name the key. */
int modelReadConfig(const StFile* file, ModelConfig* config, StError* err);

/**
 * Loads the model file at `path`: metadata, every tensor (presence, dtype F32, shape, finite), the
 * per-layer attention objects (the library reads the sketch and q/k LayerNorm from the same file).
 * Errors in the file: return 2 (TINYLM_EXIT_BAD_INPUT) with the problem in `err`; device errors 1.
 */
int modelLoad(Gpu* gpu, const char* path, Model** model, StError* err);
void modelDestroy(Model* model);
const ModelConfig* modelConfig(const Model* model);
/** Whether the model can decode step by step (polysketch and softmax; polynomial cannot). */
int modelCanDecode(const Model* model);

/**
 * Full causal forward over tokens[0..n) (positions 0..n-1), no decode state: writes the logits of
 * rows row0 .. row0 + rows - 1 into logits ([rows, V]).
 */
int modelForward(Model* model, const uint32_t* tokens, uint32_t n, uint32_t row0, uint32_t rows, float* logits,
                 StError* err);

/**
 * Starts a sequence: (re)creates the decode states with room for `capacity` tokens (softmax's KV
 * cache; polysketch's state does not grow), runs the prompt tokens[0..n) and fills the states,
 * and writes the last prompt row's logits ([V]). `stepByStep` runs the prompt as n decode steps
 * instead (a test of the step path).
 */
int modelPrefill(Model* model, const uint32_t* tokens, uint32_t n, uint32_t capacity, int stepByStep, float* logits,
                 StError* err);
/** One decode step: consumes `token` at the next position and writes its logits ([V]). */
int modelStep(Model* model, uint32_t token, float* logits, StError* err);
/** Tokens consumed by the current sequence. */
uint32_t modelPosition(const Model* model);

#endif /* TINYLM_MODEL_H */
