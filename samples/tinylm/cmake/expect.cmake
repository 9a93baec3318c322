# cmake -DCOMMAND="a@@b@@c" -DEXIT=<code> [-DMATCH=<regex>] -P expect.cmake
# Runs COMMAND (arguments separated by @@) and fails unless it exits with EXIT and its output
# (stdout and stderr) matches MATCH.
string(REPLACE "@@" ";" COMMAND "${COMMAND}")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT "${rc}" STREQUAL "${EXIT}")
  message(FATAL_ERROR "exit code ${rc}, expected ${EXIT}")
endif()
if(DEFINED MATCH AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "the output does not match: ${MATCH}")
endif()
