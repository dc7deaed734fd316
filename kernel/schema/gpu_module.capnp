# The GPU kernel module format: what the host uploads for a CUDA or OpenCL candidate.
# The image is the 8 bytes "KGPUMOD1" followed by a GpuModule as a Cap'n Proto flat
# array. Its launch geometry travels with it, so one candidate = one module whatever
# the backend. The device's module store keeps it like any other module.

@0xd2a7c1f06b3e9a45;

$import "/capnp/c++.capnp".namespace("kestrel::kernel::format");

enum GpuBackend {
  cuda @0;
  opencl @1;
}

enum GpuCodeKind {
  openclSource @0;           # OpenCL C, compiled by the device's driver
  ptx @1;                    # PTX text, JIT-compiled by the CUDA driver
  cubin @2;                  # CUDA binary for one sm_XX
}

struct GpuModule {
  backend @0 :GpuBackend;
  codeKind @1 :GpuCodeKind;
  code @2 :Data;
  entry @3 :Text;            # kernel function name
  grid @4 :List(UInt32);     # blocks / work-groups per dimension (x, y, z)
  block @5 :List(UInt32);    # threads / work-items per group (x, y, z)
  sharedBytes @6 :UInt32;    # dynamic shared memory per block (CUDA)
  buildOptions @7 :Text;     # OpenCL program build options
  deviceIndex @8 :UInt32;    # which of the runtime's devices of this backend
}

