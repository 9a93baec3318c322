// Storage types. Every kernel is compiled once per storage type with one of DATA_F32, DATA_F16,
// DATA_BF16 defined; arithmetic is always float32. ELEM is the type of a buffer element,
// LOAD_ELEM() widens one to float, STORE_ELEM() narrows a float to one.
#ifndef PSK_STORAGE_GLSL
#define PSK_STORAGE_GLSL

// 16-bit types may only appear in buffer storage (GL_EXT_shader_16bit_storage without the
// arithmetic extensions), so the conversions are macros applied right at the buffer access.
#if defined(DATA_F32)
#define ELEM float
#define LOAD_ELEM(x) (x)
#define STORE_ELEM(x) (x)
#elif defined(DATA_F16)
#extension GL_EXT_shader_16bit_storage : require
#define ELEM float16_t
#define LOAD_ELEM(x) float(x)
#define STORE_ELEM(x) float16_t(x)
#elif defined(DATA_BF16)
// bfloat16 is the high half of a float32, so it needs only 16-bit integer storage.
#extension GL_EXT_shader_16bit_storage : require
#define ELEM uint16_t
#define LOAD_ELEM(x) uintBitsToFloat(uint(x) << 16)
#define STORE_ELEM(x) uint16_t(bf16_bits(x))
uint bf16_bits(float x) {
    if (isnan(x)) return 0x7FC0u;
    // Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then truncate.
    uint u = floatBitsToUint(x);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return u >> 16;
}
#else
#error "define one of DATA_F32, DATA_F16, DATA_BF16"
#endif

#endif
