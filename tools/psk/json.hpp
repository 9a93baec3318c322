// The psk tool's JSON (reading the PyTorch peer's results and, in the tests, psk bench's own output;
// quote and number for the writers) is the library's strict parser: one implementation of parsing
// and UTF-8 checking. psk links the library build's object of lib/io/json.cpp (psk_tool_lib,
// tools/CMakeLists.txt).
#pragma once

#include "io/json.hpp"
