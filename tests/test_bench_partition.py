"""The partition benchmark runs and prints the ratio table (figures are not asserted)."""

from darling_nemo.bench.partition import main


def test_partition_bench_prints_table(capsys):
    main(["--groups", "4", "--seed", "1"])
    out = capsys.readouterr().out
    assert "1 class (8)" in out and "8 classes" in out and "ratio" in out
    # The one-class row judges a spanning tree: 7 of 28 pairs (ratio 0.25) without duplicates.
    row = next(
        line for line in out.splitlines() if line.startswith("1 class (8)") and " 0.0 " in line
    )
    assert row.split()[5:7] == ["7.00", "0.25"]
