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

struct SessionMessage {
  union {
    ping @0 :Ping;
    pong @1 :Ping;
    infoRequest @2 :InfoRequest;
    info @3 :Info;
    error @4 :SessionError;
  }
}
