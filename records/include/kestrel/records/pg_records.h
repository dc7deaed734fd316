// The records in a PostgreSQL database, for tuning sessions on several hosts that share
// one database: the same tables, behaviour and best() as the SQLite file (records.h),
// over libpq.
#pragma once

#include <memory>
#include <string>

#include "kestrel/records/records.h"

namespace kestrel::records {

// One connection to the database named by a URI "postgresql://user:password@host:port/db"
// (libpq's form; "postgres://" too; options=-csearch_path=NAME puts the tables in a schema
// of their own). Tables `meta` (schema_version 5) and `records` (id from an identity
// sequence), created when missing in OpenMode::create, in one transaction begun under an
// advisory lock, so that processes opening a fresh database at the same moment create it
// once; a version-3 or 4 database is upgraded the same way when opened for writing, and
// read as it is (the newer columns computed) when opened read-only. Every add() is one
// autocommitted INSERT: several processes add at once without losing or duplicating a
// row; an import is one transaction. OpenMode::existing never creates anything and
// refuses writes. Errors name the URI without its password.
class PgRecords final : public RecordStore {
 public:
  static constexpr int kSchemaVersion = 5;

  explicit PgRecords(const std::string& uri, OpenMode mode = OpenMode::create);
  ~PgRecords() override;
  PgRecords(const PgRecords&) = delete;
  PgRecords& operator=(const PgRecords&) = delete;

  // Whether the database at `uri` holds Kestrel's tables. Throws RecordsError when it
  // cannot be reached.
  static bool holds_records(const std::string& uri);

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
  const std::string& location() const override { return location_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string location_;  // the URI without its password
};

}  // namespace kestrel::records
