#!/usr/bin/env python3
"""CSV (as `kestrel dataset` writes it) -> Parquet, for `kestrel dataset -o X.parquet`.

usage: to_parquet.py IN.csv OUT.parquet
Exit status: 0; 3 when pyarrow cannot be imported (the message on stderr); 1 otherwise.
The text columns stay text (a workload such as "K=1,M=2" never becomes a number); the
others are inferred by pyarrow (empty cells are nulls).
"""
import sys

TEXT_COLUMNS = ["op", "workload", "target", "target_class", "device_key", "device_model", "config", "status",
                "trait.isa"]


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: to_parquet.py IN.csv OUT.parquet", file=sys.stderr)
        return 1
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError as e:
        print(f"{sys.executable} cannot import pyarrow ({e})", file=sys.stderr)
        return 3
    source, target = sys.argv[1], sys.argv[2]
    convert = pacsv.ConvertOptions(column_types={name: pa.string() for name in TEXT_COLUMNS},
                                   strings_can_be_null=False)
    table = pacsv.read_csv(source, convert_options=convert)
    pq.write_table(table, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
