// The records in an SQLite file, the store of one host: WAL mode, so that readers and the
// one writer do not block each other, and several processes may write in turn.
#pragma once

#include <memory>
#include <string>

#include "kestrel/records/records.h"

namespace kestrel::records {

// SQLite in WAL mode, one autocommitted INSERT per record. Schema version 5 (version 1
// plus the device model and is_default columns in 2, the implementation column in 3, the
// machine and recommended columns in 4, the target's fields in columns of their own beside
// its text in 5); an older file is upgraded in place when opened for writing (models of
// CPU records filled in from their fingerprints, every earlier record Kestrel's own, with
// no machine state and no recommendation, the target's columns parsed from its text) and
// read as it is when opened read-only.
class SqliteRecords final : public RecordStore {
 public:
  static constexpr int kSchemaVersion = 5;

  explicit SqliteRecords(const std::string& path, OpenMode mode = OpenMode::create);
  ~SqliteRecords() override;
  SqliteRecords(const SqliteRecords&) = delete;
  SqliteRecords& operator=(const SqliteRecords&) = delete;

  std::int64_t add(const Record& record) override;
  std::vector<Record> find(const std::string& op, const ops::Params& workload, const ops::TargetId& target,
                           const DeviceClass* device_class = nullptr) const override;
  std::vector<Record> find_other_workloads(const std::string& op, const ops::Params& workload,
                                           const ops::TargetId& target, std::size_t limit = 5000) const override;
  using RecordStore::best;
  std::vector<Best> best(const BestQuery& q) const override;
  std::vector<Record> all(const std::string& op = "") const override;
  std::size_t count() const override;
  void export_jsonl(std::ostream& out) const override;
  std::size_t import_jsonl(std::istream& in) override;
  const std::string& location() const override { return path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

}  // namespace kestrel::records
