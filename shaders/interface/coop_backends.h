// The cooperative-matrix backends and kernels, declared once. shaders/CMakeLists.txt reads the two
// lists below (one X(...) per line) and builds every kernel once per backend, sub-variant and
// storage type; the host's typed lookups (lib/kernels/coop_variants.hpp) and the kernel table's
// axes come from the same lists, so a variant the plan can ask for is one the build made.
#ifndef PSK_INTERFACE_COOP_BACKENDS_H
#define PSK_INTERFACE_COOP_BACKENDS_H

// X(axis, CoopBackend, CoopOperand, "defines", "storage types", condition): condition is the CMake
// variable that says the compiler at hand can build it (TRUE: always).
#define PSK_COOP_BACKENDS(X) \
    X(nv_f16, NV, F16, "COOPMAT_NV OPERAND_F16", "f32 f16 bf16", PSK_GLSLC_NV_COOPMAT) \
    X(khr_f16, KHR, F16, "COOPMAT_KHR OPERAND_F16", "f32 f16 bf16", PSK_KHR_COMPILER) \
    X(khr_bf16, KHR, BF16, "COOPMAT_KHR OPERAND_BF16", "bf16", PSK_KHR_BF16) \
    X(emu_f16, Emulated, F16, "COOPMAT_EMULATED OPERAND_F16", "f32 f16 bf16", TRUE) \
    X(emu_bf16, Emulated, BF16, "COOPMAT_EMULATED OPERAND_BF16", "f32 f16 bf16", TRUE)

// X(KernelId, name, "sub-variants": "value=DEFINE ..." appended to the backend's axis as
// "<backend>_<value>"; "" for none)
#define PSK_COOP_KERNELS(X) \
    X(AttentionTiledCoopMat, attention_tiled_coopmat, "softmax=KIND_SOFTMAX polynomial=KIND_POLYNOMIAL") \
    X(AttentionFlashCoopMat, attention_flash_coopmat, "softmax=KIND_SOFTMAX polynomial=KIND_POLYNOMIAL") \
    X(SketchFeaturesCoopMat, sketch_features_coopmat, "random=SKETCH_RANDOM learned=SKETCH_LEARNED") \
    X(BlockStatesCoopMat, block_states_coopmat, "") \
    X(PolysketchOutputCoopMat, polysketch_output_coopmat, "")

#endif
