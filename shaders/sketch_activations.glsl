// The elementwise functions of the learned sketch (docs/MATH.md section 4), shared by the feature
// map kernels (sketch_features.comp, sketch_features_coopmat.comp) so both evaluate the same
// float32 formulas.
#ifndef PSK_SKETCH_ACTIVATIONS_GLSL
#define PSK_SKETCH_ACTIVATIONS_GLSL

// tanh from one exp of a non-positive argument: no overflow, no inf/inf.
float stable_tanh(float x) {
    const float t = exp(-2.0 * abs(x));
    return sign(x) * (1.0 - t) / (1.0 + t);
}

// gelu, tanh approximation.
float gelu_tanh(float x) {
    const float k = 0.7978845608028654;  // sqrt(2 / pi)
    return 0.5 * x * (1.0 + stable_tanh(k * (x + 0.044715 * x * x * x)));
}

#endif
