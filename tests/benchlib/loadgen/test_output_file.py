from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from benchlib.loadgen.cli_io import write_output


def test_output_to_a_regular_file_is_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    target.write_text("old")
    write_output(target, '{"levels": []}\n')
    assert target.read_text() == '{"levels": []}\n'
    assert not (tmp_path / "results.json.tmp").exists()


def test_output_onto_a_fifo_writes_through_and_keeps_the_fifo(tmp_path: Path) -> None:
    # The same path as --output /dev/null: the special file must survive the write.
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    write_output(fifo, "payload\n")
    reader.join(timeout=10)
    assert received == ["payload\n"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
