// Forwards to reference/sketch_fixtures.hpp, the fixtures' home since psk stopped depending on
// tests/. Only cmd_bench.cpp still includes this path; once it names reference/sketch_fixtures.hpp,
// this file goes.
#pragma once

#include "reference/sketch_fixtures.hpp"
