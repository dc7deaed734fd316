// A record's one JSON form: a line of `kestrel records export`, and what Python's
// kestrel.read_records rows are made of (python/src/records.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include "kestrel/records/records.h"

namespace kestrel::records {

// id, op, workload, target, device_key, device_model, device, device_fingerprint, config,
// status, message, round_seconds, cost (null when not ok), gflops, compile_ms,
// tool_version, time_unix_ms, session, final_measurement, is_default, implementation,
// machine (null when unknown), recommended.
nlohmann::ordered_json to_json(const Record& record);

}  // namespace kestrel::records
