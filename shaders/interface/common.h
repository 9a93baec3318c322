// Shared by GLSL and C++: the macros of the kernel interface headers (shaders/interface/*.h).
// A kernel's specialization constants are an X-macro list of (constant_id, GLSL type, NAME,
// default); its push constants one block between PSK_PUSH_BEGIN and PSK_PUSH_END; its storage
// buffers an X-macro list of (binding, NAME, access), access one of read, write, read_write (what
// the kernel does to the buffer: the host's hazard tracking takes it from here). In GLSL the
// spec list becomes `layout(constant_id = id) const type NAME = default;` lines, the binding list
// (PSK_DECLARE_BINDINGS) `const int BINDING_NAME = binding;` lines that the shader's
// `layout(std430, binding = BINDING_NAME) buffer ...` declarations use (a variant may declare
// several views of one binding, or leave one out), and the block the shader's push-constant block
// `params`; in C++ (lib/kernels/kernel_interface.hpp, which includes these headers inside
// namespace psk::kernel with `uint` = uint32_t) a struct with a field per constant, a struct with
// a named buffer field per binding tied to the push-constant struct (kernels/kernel_dispatch.hpp
// records a dispatch from the two), and the push-constant struct, laid out as std430 lays out the
// block (only 32-bit scalars, arrays of them and TensorStrides, so the layouts agree field for
// field).
#ifndef PSK_INTERFACE_COMMON_H
#define PSK_INTERFACE_COMMON_H

#ifdef __cplusplus
#define PSK_PUSH_BEGIN(Name) struct Name {
#define PSK_PUSH_END };
#else
#define PSK_SPEC_DECLARATION(id, type, name, value) layout(constant_id = id) const type name = value;
#define PSK_DECLARE_SPECS(LIST) LIST(PSK_SPEC_DECLARATION)
#define PSK_BINDING_DECLARATION(binding, name, access) const int BINDING_##name = binding;
#define PSK_DECLARE_BINDINGS(LIST) LIST(PSK_BINDING_DECLARATION)
#define PSK_PUSH_BEGIN(Name) layout(push_constant) uniform Name {
#define PSK_PUSH_END } params;
#endif

// Element strides of a 4-D tensor [batch, head, token, feature] whose feature dimension is
// contiguous. Layout (BHND, BNHD, custom) is only ever expressed through these strides.
struct TensorStrides {
    uint batch;
    uint head;
    uint token;
};

#endif
