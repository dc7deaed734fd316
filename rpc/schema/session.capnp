# Session messages: what a lease holder and its device say to each other. Each one
# travels as the payload of a tracker.capnp `Relay` frame; the tracker never reads it.
# The session protocol shares tracker.capnp's protocolVersion.

@0xb0e54529ccd0b3c1;

$import "/capnp/c++.capnp".namespace("kestrel::wire");

using Tracker = import "tracker.capnp";

struct Ping {
  seq @0 :UInt64;
}

struct InfoRequest {
  seq @0 :UInt64;
}

struct Info {
  seq @0 :UInt64;
  info @1 :Tracker.DeviceInfo;
}

# A device's answer to a message it could not handle.
struct SessionError {
  seq @0 :UInt64;
  message @1 :Text;
}

# ---- kernel modules ------------------------------------------------------------
# Modules are ELF shared objects built on the host, named by the host compiler's
# content hash (64 hex digits). The device keeps them in memory (memfd) and answers
# which ones it already has, so each is uploaded once.

struct QueryModules {
  seq @0 :UInt64;
  hashes @1 :List(Text);
}

struct ModulesPresent {
  seq @0 :UInt64;
  present @1 :List(Bool);    # parallel to QueryModules.hashes
}

struct UploadModule {
  seq @0 :UInt64;
  hash @1 :Text;
  image @2 :Data;
}

struct ModuleStored {
  seq @0 :UInt64;
  hash @1 :Text;
}

# GPU modules (CUDA, OpenCL) are images in the format of kernel/schema/gpu_module.capnp.

# ---- measurement -----------------------------------------------------------------

enum MeasureStatus {
  ok @0;
  instantiationError @1;     # invalid configuration (host side)
  hostCompileError @2;       # host side
  deviceLoadError @3;        # module missing, wrong architecture or ABI, dlopen failed
  runtimeError @4;           # signal or non-zero return in the kernel
  wrongAnswer @5;            # output differs from the reference beyond the tolerance
  buildTimeout @6;           # host side
  runTimeout @7;             # the candidate exceeded its time limit
  deviceLost @8;             # host side: the device went away
  deviceCompileError @9;     # the device's driver refused the kernel (OpenCL build, CUDA module load)
}

enum DataType {
  f32 @0;
}

struct TensorArg {
  elements @0 :Int64;
  dtype @1 :DataType;
  isOutput @2 :Bool;
}

struct MeasureSettings {
  number @0 :UInt32;         # calls per round; 0: grow until a round lasts minRepeatMs
  repeat @1 :UInt32;         # timed rounds
  minRepeatMs @2 :UInt32;
  cooldownMs @3 :UInt32;     # pause between rounds
  flushCache @4 :Bool;       # overwrite the caches (CPU caches, or the GPU's L2) before each round
  timeoutMs @5 :UInt32;      # per candidate, warm-up and check included
  threads @6 :UInt32;        # parallel_for threads; 0: all cores
  seed @7 :UInt64;           # input data seed
}

struct Candidate {
  id @0 :UInt64;
  moduleHash @1 :Text;
  entry @2 :Text;            # the kernel's entry symbol; empty: the module's only kernel
}

# Runs each candidate on the same deterministic random inputs; checks its outputs
# against the reference module's (when referenceHash is set); times it.
struct MeasureBatch {
  seq @0 :UInt64;
  args @1 :List(TensorArg);
  referenceHash @2 :Text;
  tolerance @3 :Float64;     # |out - ref| <= tolerance * (1 + |ref|)
  settings @4 :MeasureSettings;
  candidates @5 :List(Candidate);
  referenceEntry @6 :Text;   # the reference kernel's entry symbol; empty: its only kernel
}

# What the device's machine was doing when a result was taken, where the board exposes it
# (Linux /proc and /sys); a negative value: not exposed.
struct MachineState {
  load1 @0 :Float64;          # 1-minute load average
  cpuMhz @1 :Float64;         # current frequency of the CPU the runtime runs on
  temperatureC @2 :Float64;   # the hottest thermal zone
  throttled @3 :Bool;         # the board says it throttled (Raspberry Pi firmware, or cpufreq below its maximum while hot)
  busyCpus @4 :Float64;       # CPUs busy with other processes over the candidate's run (0..cores), from /proc/stat
}

struct MeasureResult {
  seq @0 :UInt64;
  candidateId @1 :UInt64;
  status @2 :MeasureStatus;
  message @3 :Text;
  number @4 :UInt32;
  roundSeconds @5 :List(Float64);   # per-call time of every round
  maxError @6 :Float64;             # largest |out - ref| seen
  loadMs @7 :Float64;
  machine @8 :MachineState;
}

struct BatchDone {
  seq @0 :UInt64;
  message @1 :Text;          # non-empty when the batch could not run at all
}

# Sent by the device while a batch runs, so the holder's wait follows the work: the
# batch's inputs and reference are ready (candidateId 0, started false), or a candidate
# started (its id, started true). limitMs is the device's own limit for what comes next:
# the next message of this batch is due within it (plus the network's slack).
struct BatchProgress {
  seq @0 :UInt64;
  candidateId @1 :UInt64;
  started @2 :Bool;
  limitMs @3 :UInt32;
}

struct SessionMessage {
  union {
    ping @0 :Ping;
    pong @1 :Ping;
    infoRequest @2 :InfoRequest;
    info @3 :Info;
    error @4 :SessionError;
    queryModules @5 :QueryModules;
    modulesPresent @6 :ModulesPresent;
    uploadModule @7 :UploadModule;
    moduleStored @8 :ModuleStored;
    measureBatch @9 :MeasureBatch;
    measureResult @10 :MeasureResult;
    batchDone @11 :BatchDone;
    batchProgress @12 :BatchProgress;
  }
}
