// How a test lays a dense [B][H][n][dim] tensor out for the device: reference/device_layout.hpp,
// shared with psk conformance.
#pragma once

#include "reference/device_layout.hpp"

namespace psk::test {

using psk::conformance::DeviceLayout;

}  // namespace psk::test
