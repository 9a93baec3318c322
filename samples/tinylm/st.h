/*
 * st.h: a small .safetensors reader and writer for tinylm (C99).
 *
 * The format (huggingface/safetensors): an 8-byte little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__":
 * {"key": "value", ...}}, then the data buffer. The reader follows docs/MATH.md section 8's rules:
 * a regular file, a header of at most 100,000,000 bytes inside the file, every tensor's range
 * inside the data buffer, of the size its shape and dtype give, and no byte in two tensors. It
 * reads the header at open and each tensor's bytes only when asked. Dtypes: F32, I32, U8 (others
 * are listed but cannot be read).
 *
 * Every function that can fail returns 0 on success and non-zero on failure with a message in
 * `err` (StError); the message names the file and the problem.
 */
#ifndef TINYLM_ST_H
#define TINYLM_ST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ST_MAX_DIMS 8

typedef struct StError {
    char text[4096];
} StError;

typedef enum StDtype { ST_F32 = 0, ST_I32 = 1, ST_U8 = 2, ST_OTHER = 3 } StDtype;

typedef struct StTensor {
    char* name;
    char dtypeName[16];
    StDtype dtype;
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte range in the data buffer */
} StTensor;

typedef struct StMeta {
    char* key;
    char* value;
} StMeta;

typedef struct StFile {
    char* path;
    FILE* file;
    uint64_t fileSize;
    uint64_t dataStart; /* 8 + header length */
    StTensor* tensors;
    size_t tensorCount;
    StMeta* meta;
    size_t metaCount;
} StFile;

/** Opens and validates `path` (header only). On failure `*file` is left empty (stClose-able). */
int stOpen(const char* path, StFile* file, StError* err);
void stClose(StFile* file);

const StTensor* stFind(const StFile* file, const char* name);
/** The metadata value of `key`, or NULL. */
const char* stMeta(const StFile* file, const char* key);
/** Elements of a tensor (product of its shape; 1 for a scalar). */
uint64_t stElements(const StTensor* tensor);
/** Reads the tensor's bytes (end - begin of them) into dst. */
int stRead(StFile* file, const StTensor* tensor, void* dst, StError* err);

/* ---- Writing ---- */

typedef struct StWriteTensor {
    const char* name;
    StDtype dtype;
    uint32_t ndim;
    uint64_t shape[ST_MAX_DIMS];
    const void* data; /* elements x dtype bytes */
} StWriteTensor;

/**
 * Writes a file with the tensors in the given order, back to back, and the metadata (string pairs).
 * `truncateTo` > 0 cuts the file to that many bytes (for tests of broken files).
 */
int stWrite(const char* path, const StWriteTensor* tensors, size_t tensorCount, const StMeta* meta, size_t metaCount,
            uint64_t truncateTo, StError* err);

size_t stDtypeBytes(StDtype dtype);

#endif /* TINYLM_ST_H */
