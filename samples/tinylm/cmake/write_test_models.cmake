# cmake -DTINYLM=<tinylm> -DOUT=<dir> -P write_test_models.cmake
# The tests' own model files, written by the app (no Python needed): random models of every
# attention kind, and broken files, each with one defect.
file(MAKE_DIRECTORY "${OUT}")
function(write name)
  execute_process(COMMAND "${TINYLM}" --write-random-model "${OUT}/${name}.safetensors" ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tinylm --write-random-model ${name} ${ARGN}: exit code ${rc}")
  endif()
endfunction()
# Small blocks (16) so that prompts and decoding cross block boundaries.
write(random_polysketch_learned --attention polysketch --sketch learned --block-size 16 --local-exact 1 --seed 1)
write(random_polysketch_random --attention polysketch --sketch random --block-size 16 --local-exact 0 --seed 2)
write(random_softmax --attention softmax --seed 3)
write(random_polynomial --attention polynomial --seed 4)
foreach(defect missing-tensor missing-sketch wrong-shape wrong-dtype truncated bad-metadata nan)
  write(broken_${defect} --attention polysketch --block-size 16 --defect ${defect})
endforeach()
