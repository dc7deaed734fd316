// The device's machine when a kernel was measured: what the device reports beside each
// result (session.capnp MachineState) and the records keep with it.
#pragma once

namespace kestrel::kernel {

// Negative: the board does not expose it.
struct MachineState {
  double load1 = -1;
  double cpu_mhz = -1;
  double temperature_c = -1;
  bool throttled = false;
  double busy_cpus = -1;

  bool known() const { return load1 >= 0 || cpu_mhz >= 0 || temperature_c >= 0 || busy_cpus >= 0; }
  friend bool operator==(const MachineState&, const MachineState&) = default;
};

}  // namespace kestrel::kernel
