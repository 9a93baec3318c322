# The tinylm tests (included by CMakeLists.txt under PSK_BUILD_TESTS). Every run uses --validate:
# the validation layer (with synchronization validation) on the app's instance, any message fails.
#
# - committed models (models/*.golden.safetensors, from PyTorch): `tinylm check` (every logit
#   within 1e-4 of PyTorch's; greedy decoding = argmax of the full forward), and for the synthetic
#   tasks `tinylm eval` on the first TINYLM_TEST_EVAL_LIMIT examples, per example equal to PyTorch's
#   eval_correct;
# - random models written by the app itself (any checkout, no Python): decoding = full forward for
#   polysketch (learned and random sketch, local exact or not) and softmax;
# - broken files: exit code 2 and a message naming the problem; a check that must fail: exit 1.
set(TINYLM_TEST_EVAL_LIMIT 32 CACHE STRING "tinylm tests: evaluation examples per synthetic-task model")
set(tinylm_models_dir "${CMAKE_CURRENT_SOURCE_DIR}/models")
set(tinylm_test_dir "${CMAKE_CURRENT_BINARY_DIR}/test_models")
set(tinylm_expect "${CMAKE_CURRENT_SOURCE_DIR}/cmake/expect.cmake")

function(tinylm_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "gpu;samples" TIMEOUT 300)
endfunction()

# expect: tinylm_expect_test(NAME EXIT REGEX args...) runs tinylm with args.
function(tinylm_expect_test name exit regex)
  string(REPLACE ";" "@@" args "${ARGN}")
  add_test(NAME ${name} COMMAND "${CMAKE_COMMAND}" "-DCOMMAND=$<TARGET_FILE:tinylm>@@${args}" -DEXIT=${exit}
                                "-DMATCH=${regex}" -P "${tinylm_expect}")
  set_tests_properties(${name} PROPERTIES LABELS "gpu;samples" TIMEOUT 120)
endfunction()

# The app's own test models.
add_test(NAME tinylm_write_test_models
         COMMAND "${CMAKE_COMMAND}" -DTINYLM=$<TARGET_FILE:tinylm> "-DOUT=${tinylm_test_dir}"
                 -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/write_test_models.cmake")
set_tests_properties(tinylm_write_test_models PROPERTIES LABELS "samples" FIXTURES_SETUP tinylm_test_models)

# Decoding against the full forward on random models (prompt 21 tokens, 40 steps, blocks of 16).
foreach(model random_polysketch_learned random_polysketch_random random_softmax)
  tinylm_test(tinylm_decode_${model} tinylm check "${tinylm_test_dir}/${model}.safetensors" --prompt-len 21 --tokens 40 --validate)
  set_tests_properties(tinylm_decode_${model} PROPERTIES FIXTURES_REQUIRED tinylm_test_models)
endforeach()
tinylm_expect_test(tinylm_generate_random_polynomial 0 "generation: 8 tokens"
                   generate "${tinylm_test_dir}/random_polynomial.safetensors" --prompt-tokens 1,2,3 --tokens 8 --validate)
tinylm_expect_test(tinylm_bench_random_softmax 0 "\\| 64 \\|.*\\| 96 \\|"
                   bench "${tinylm_test_dir}/random_softmax.safetensors" --context 64,96 --tokens 4 --validate)
set_tests_properties(tinylm_generate_random_polynomial tinylm_bench_random_softmax PROPERTIES FIXTURES_REQUIRED tinylm_test_models)

# Broken files: exit code 2 and a message naming the problem.
set(broken_missing-tensor "missing tensor \"layers.0.mlp.w1\"")
set(broken_missing-sketch "layer 1 .*missing tensor \"f1.0.dense1\"")
set(broken_wrong-shape "tensor \"ln_f.scale\" has shape \\[63\\], expected \\[64\\]")
set(broken_wrong-dtype "tensor \"ln_f.bias\" has dtype I32, expected F32")
set(broken_truncated "truncated")
set(broken_bad-metadata "\"attention\" is \"linear\"")
set(broken_nan "\"tok_emb\" holds a non-finite value")
foreach(defect missing-tensor missing-sketch wrong-shape wrong-dtype truncated bad-metadata nan)
  tinylm_expect_test(tinylm_bad_${defect} 2 "${broken_${defect}}" check "${tinylm_test_dir}/broken_${defect}.safetensors" --validate)
  set_tests_properties(tinylm_bad_${defect} PROPERTIES FIXTURES_REQUIRED tinylm_test_models)
endforeach()
tinylm_expect_test(tinylm_bad_directory 2 "is not a regular file" check "${CMAKE_CURRENT_SOURCE_DIR}" --validate)
tinylm_expect_test(tinylm_bad_missing_file 2 "cannot open" check "${tinylm_test_dir}/no_such_model.safetensors" --validate)
tinylm_expect_test(tinylm_bad_not_safetensors 2 "header length .* exceeds" check "${CMAKE_CURRENT_SOURCE_DIR}/MODEL.md" --validate)
tinylm_expect_test(tinylm_bad_usage 2 "unknown mode" frobnicate model.safetensors)
tinylm_expect_test(tinylm_bad_golden 2 "missing tensor \"tokens\"" check "${tinylm_test_dir}/random_softmax.safetensors"
                   --golden "${tinylm_test_dir}/random_softmax.safetensors" --validate)
set_tests_properties(tinylm_bad_golden PROPERTIES FIXTURES_REQUIRED tinylm_test_models)

# Committed models with PyTorch's golden logits.
file(GLOB tinylm_goldens "${tinylm_models_dir}/*.golden.safetensors")
foreach(golden IN LISTS tinylm_goldens)
  get_filename_component(file "${golden}" NAME)
  string(REGEX REPLACE "\\.golden\\.safetensors$" "" model "${file}")
  if(NOT EXISTS "${tinylm_models_dir}/${model}.safetensors")
    continue()
  endif()
  tinylm_test(tinylm_check_${model} tinylm check "${tinylm_models_dir}/${model}.safetensors" --golden "${golden}" --tokens 24
              --validate)
  # The golden file's metadata names the task's evaluation file (synthetic tasks).
  file(READ "${golden}" length_hex LIMIT 8 HEX)
  string(REGEX REPLACE "^(..)(..)(..)(..)(..)(..)(..)(..)$" "\\4\\3\\2\\1" length_hex "${length_hex}")
  math(EXPR header_length "0x${length_hex}")
  file(READ "${golden}" header OFFSET 8 LIMIT ${header_length})
  string(JSON eval_file ERROR_VARIABLE no_eval GET "${header}" "__metadata__" "eval_file")
  if(NOT no_eval AND EXISTS "${tinylm_models_dir}/${eval_file}")
    tinylm_test(tinylm_eval_${model} tinylm eval "${tinylm_models_dir}/${model}.safetensors" --data
                "${tinylm_models_dir}/${eval_file}" --golden "${golden}" --limit ${TINYLM_TEST_EVAL_LIMIT} --validate)
  endif()
endforeach()
# A check that must fail: another model's golden logits.
if(EXISTS "${tinylm_models_dir}/bytes_polysketch.safetensors" AND EXISTS "${tinylm_models_dir}/bytes_softmax.golden.safetensors")
  tinylm_expect_test(tinylm_check_detects_mismatch 1 "max relative error .*FAILED" check
                     "${tinylm_models_dir}/bytes_polysketch.safetensors" --golden "${tinylm_models_dir}/bytes_softmax.golden.safetensors"
                     --tokens 2 --validate)
endif()
if(EXISTS "${tinylm_models_dir}/bytes_polysketch.safetensors")
  tinylm_expect_test(tinylm_generate_bytes_polysketch 0 "generation: 16 tokens" generate
                     "${tinylm_models_dir}/bytes_polysketch.safetensors" --prompt "In the beginning" --tokens 16 --temperature 0.8
                     --top-k 20 --seed 7 --validate)
endif()
