"""Generic CSV: delimited text with a user-given column mapping, read in bounded blocks.

The file is cut into blocks of whole lines (about ``ReadOptions.batch_rows`` rows each)
and every block is parsed by ``pyarrow.csv.read_csv`` with the expected column types,
using all cores. A block with a field pyarrow cannot convert is parsed again with every
column as bytes and cast column by column, so each bad field becomes a reject and the
rest of the block survives.

Row numbers are 1-based *data line* numbers: line 1 is the first line after the header
(the first line of the file without one). Blank lines are skipped but counted, so a row
number always points at the physical line ``row + 1`` (with a header) of the
decompressed file. Decoded rows carry no raw text (``EventBatch.raw`` is ``None``: the
source line is file + row); rejects carry the raw line.
"""

from __future__ import annotations

import csv as pycsv
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import IO

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pacsv

from ticktensor._memory import fresh_buffer
from ticktensor.errors import ConfigError, InputError, SchemaError
from ticktensor.ingest._background import read_ahead
from ticktensor.ingest._sources import Input, MappedFile
from ticktensor.schemas import EventKind, schema_for

from ._bar_grid import BarGrid
from ._base import EventBatch, Reader, ReadOptions
from ._columns import NULL_VALUES, Bad, ColumnPlan, convert, plan_columns, resolve_time, safe_cast
from ._csv_lines import parse_lines
from ._layout_hints import layout_hint
from ._rejects import InvalidRows, LineMismatchError, Rejects

__all__ = ["CsvReader"]

#: Longest line accepted (a market data line is well under 1 KiB).
MAX_LINE_BYTES = 16 << 20
_MAX_BLOCK = 32 << 20  # bytes per block: bounded memory; reading overlaps parsing
#: Bytes of a CSV block parsed without pyarrow's thread pool.
_SMALL_BLOCK = 1 << 16


class CsvReader(Reader):
    """Delimited text in any canonical kind, mapped by ``ReadOptions.csv``.

    Examples
    --------
    >>> from ticktensor.ingest._sources import expand_inputs
    >>> from ticktensor.ingest.readers import CsvFormat, ReadOptions
    >>> import fsspec
    >>> with fsspec.open("memory://doc/t.csv", "w") as f:
    ...     _ = f.write("time,px,qty\\n1700000000000,10.5,2\\n")
    >>> fmt = CsvFormat(columns={"ts_event": "time", "price": "px", "size": "qty"},
    ...                 ts_unit="ms")
    >>> opts = ReadOptions(kind="trades", symbol="X", csv=fmt)
    >>> [batch] = CsvReader().read(expand_inputs(["memory://doc/t.csv"])[0], opts)
    >>> batch.table.column("price").to_pylist(), batch.rows.tolist()
    ([10.5], [1])
    """

    name = "csv"
    suffixes = (".csv", ".txt", ".tsv")

    def read(self, source: Input, options: ReadOptions) -> Iterator[EventBatch]:
        """Decode ``source`` in batches of at most ``options.batch_rows`` rows."""
        if options.kind is None:
            kinds = ", ".join(k.value for k in EventKind)
            raise ConfigError(f"{source.url}: CSV needs an event kind (--schema): one of {kinds}")
        with source.open_mapped() as stream:
            yield from _CsvDecoder(source, options, options.kind).decode(stream)


@dataclass
class _Parsed:
    """A block parsed with the expected column types, not yet decoded."""

    block: memoryview
    rejects: Rejects
    utf8: bool
    #: None when a field does not fit its expected type (the block is parsed again).
    table: pa.Table | None


class _CsvDecoder:
    """State of one CSV read: columns, plan, parse options and the next row number."""

    def __init__(self, source: Input, options: ReadOptions, kind: EventKind) -> None:
        self.source = source
        self.options = options
        self.kind = kind
        self.fmt = options.csv
        self.next_row = 1

    def decode(self, stream: IO[bytes]) -> Iterator[EventBatch]:
        data = _read_line(stream, b"", self.source.url)
        if data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        line = data.partition(b"\n")[0]  # the header, or the first data line
        if self.fmt.header:
            header, _, data = data.partition(b"\n")
            names = self._fields(header)
            data = _read_line(stream, data, self.source.url)
        else:
            names = [str(i) for i in range(len(self._fields(data.partition(b"\n")[0])))]
        if not data.strip(b"\r\n") and not names:
            return
        try:
            plan = plan_columns(self.kind, names, self.options, self.source.name)
        except SchemaError as exc:
            text = line.decode("utf-8", "replace")
            hint = layout_hint(text, self.fmt.delimiter, self.fmt.header)
            if not hint:
                raise
            raise SchemaError(f"{exc}{hint}") from None
        first = self._fields(data.partition(b"\n")[0]) if data.strip(b"\r\n") else []
        plan = resolve_time(plan, *(self._first(names, first, c) for c in self._time_columns(plan)))
        self._setup(names, plan, first)
        self.grid = BarGrid(plan, self.source.url) if plan.bar_interval_open else None
        self.announced = False
        self.per_row = max(len(data.partition(b"\n")[0]) + 1, 8)
        if isinstance(stream, MappedFile):
            # Blocks are mapped windows of the file: no reading to overlap with parsing
            # (the file is hashed on a thread of its own).
            start = stream.tell() - len(data)  # the first line after the header
            blocks: Iterator[memoryview] = _mapped_blocks(
                stream, start, self._block_bytes, self.source.url
            )
            one_block = stream.size - start <= max(self._block_bytes(), 1 << 12)
        else:
            one_block = False
            # A file larger than a block (compressed or not) fills its first block too.
            large = self.source.size > self._block_bytes()
            # Reading (decompression, hashing) overlaps with parsing.
            blocks = read_ahead(
                _blocks(stream, data, self._block_bytes, self.source.url, large),
                "ticktensor-csv-read",
            )
        # The next block is parsed (pyarrow, every core) while this one's rows are
        # numbered, converted and handed on: one thread does not wait for the other. A
        # mapped file of one block has no next block: a thread would only cost its start.
        parsed_blocks: Iterator[_Parsed] = map(self._parse, blocks)
        if not one_block:
            parsed_blocks = read_ahead(parsed_blocks, "ticktensor-csv-parse")
        for parsed in parsed_blocks:
            batches = list(self._decode_block(parsed, plan))
            rows = sum(b.table.num_rows for b in batches)
            self.per_row = max(1, len(parsed.block) // max(rows, 1))
            yield from batches

    @staticmethod
    def _time_columns(plan: ColumnPlan) -> list[str | None]:
        return [plan.sources.get("ts_event"), plan.ts_time]

    @staticmethod
    def _first(names: list[str], first: list[str], column: str | None) -> str | None:
        index = names.index(column) if column in names else len(first)
        return first[index] if index < len(first) else None

    def _block_bytes(self) -> int:
        """Bytes for about ``batch_rows`` lines, from the bytes per row seen so far."""
        return int(min(max(self.options.batch_rows * self.per_row * 1.05, 256), _MAX_BLOCK))

    def _fields(self, line: bytes) -> list[str]:
        try:
            text = line.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{self.source.url}: first line is not UTF-8 ({exc})") from None
        return next(pycsv.reader([text], delimiter=self.fmt.delimiter), [])

    def _setup(self, names: list[str], plan: ColumnPlan, first: list[str]) -> None:
        self.names = names
        self.plan = plan
        schema = schema_for(self.kind)
        types: dict[str, pa.DataType] = {}
        for canonical, column in plan.sources.items():
            target = schema.field(canonical).type
            if canonical == "side":
                target = pa.dictionary(pa.int32(), pa.string())
            elif pa.types.is_timestamp(target):
                target = self._ts_type(self._first(names, first, column) or "")
            types[column] = target
        if plan.ts_time is not None:
            types[plan.ts_time] = pa.string()
        self.types = types
        self.parse = pacsv.ParseOptions(delimiter=self.fmt.delimiter)

    def _ts_type(self, first: str) -> pa.DataType:
        numeric = first.strip().lstrip("+-").isdigit()
        time = self.plan.time
        epoch = time is not None and time.format is None and time.unit in ("ns", "us")
        if epoch and self.plan.ts_time is None and numeric:
            return pa.int64()
        return pa.string()

    def _read(
        self,
        block: memoryview,
        types: dict[str, pa.DataType],
        rejects: Rejects,
        handler: bool = True,
    ) -> pa.Table:
        convert_opts = pacsv.ConvertOptions(
            column_types=types,
            include_columns=self.plan.file_columns,
            null_values=NULL_VALUES,
            strings_can_be_null=False,
        )
        parse = pacsv.ParseOptions(
            delimiter=self.fmt.delimiter,
            invalid_row_handler=rejects.invalid_row if handler else None,
        )
        # A chunk per thread rather than per MiB: a block's rows are parsed as fast, and
        # the session's merge later takes rows from a few chunks instead of hundreds.
        chunk = max(1 << 20, -(-len(block) // pa.cpu_count()))
        # A small block (a day's bars) is parsed on this thread: waking pyarrow's pool
        # for it costs more than its parse, and one chunk comes out either way.
        threads = len(block) > _SMALL_BLOCK
        return pacsv.read_csv(
            pa.py_buffer(block),
            read_options=pacsv.ReadOptions(
                column_names=self.names, block_size=chunk, use_threads=threads
            ),
            parse_options=parse,
            convert_options=convert_opts,
        )

    def _parse(self, block: memoryview) -> _Parsed:
        """The block parsed with the expected column types (blocks may be parsed ahead:
        the row numbers are set when it is decoded, in order)."""
        rejects = Rejects(self.source.url, block, 0)
        # pyarrow cannot hand a non-UTF-8 malformed line to the invalid-row handler (it
        # fails inside the callback): such blocks parse without one, and a malformed line
        # then sends the block to the line-by-line parser.
        utf8 = _is_utf8(block)
        try:
            table = self._read(block, self.types, rejects, handler=utf8)
        except pa.ArrowInvalid:
            table = None
        return _Parsed(block, rejects, utf8, table)

    def _decode_block(self, parsed: _Parsed, plan: ColumnPlan) -> Iterator[EventBatch]:
        block, rejects, utf8 = parsed.block, parsed.rejects, parsed.utf8
        first_row = rejects.first_row = self.next_row
        table = parsed.table
        encoding: list[Bad] = []
        if table is None:  # a field the expected types cannot hold
            rejects = Rejects(self.source.url, block, first_row)
            as_bytes = dict.fromkeys(plan.file_columns, pa.binary())
            try:
                table = self._read(block, as_bytes, rejects, handler=utf8)
                table, encoding = self._to_text(table)
                positions = rejects.positions(table.num_rows, self._recount)
            except (pa.ArrowInvalid, LineMismatchError):
                rejects = Rejects(self.source.url, block, first_row)
                table, positions = parse_lines(
                    block, self.names, plan.file_columns, self.fmt.delimiter, rejects
                )
                encoding = []
        else:
            try:
                positions = rejects.positions(table.num_rows, self._recount)
            except LineMismatchError:
                rejects = Rejects(self.source.url, block, first_row)
                table, positions = parse_lines(
                    block, self.names, plan.file_columns, self.fmt.delimiter, rejects
                )
        self.next_row += rejects.n_lines
        canonical, bads = convert(table, plan)
        if self.grid is not None and canonical.num_rows:
            canonical, off_grid = self.grid.apply(canonical, plan.sources["ts_event"])
            bads += [off_grid] if off_grid is not None else []
        keep = rejects.add_bad(encoding + bads, positions)
        if keep is not None:
            canonical = canonical.filter(pa.array(keep))
            positions = positions[keep]
        for batch in _split(self.kind, canonical, positions + first_row, rejects, self.options):
            if self.announced:
                yield batch
                continue
            self.announced = True
            note = () if self.grid is None or self.grid.note is None else (self.grid.note,)
            yield replace(batch, inference=plan.inference(*note))

    def _recount(self, block: memoryview) -> InvalidRows:
        """Where the invalid rows of ``block`` are (a single-threaded re-parse numbers them)."""
        numbers: InvalidRows = []

        def handler(row: pacsv.InvalidRow) -> str:
            numbers.append((int(row.number), int(row.expected_columns), int(row.actual_columns)))
            return "skip"

        parse = pacsv.ParseOptions(delimiter=self.fmt.delimiter, invalid_row_handler=handler)
        read_opts = pacsv.ReadOptions(column_names=self.names, use_threads=False)
        convert_opts = pacsv.ConvertOptions(
            column_types=dict.fromkeys(self.names, pa.binary()),
            include_columns=self.names[:1],
        )
        pacsv.read_csv(pa.py_buffer(block), read_opts, parse, convert_opts)
        return numbers

    def _to_text(self, table: pa.Table) -> tuple[pa.Table, list[Bad]]:
        """Bytes columns to text; fields that are not UTF-8 become ``encoding`` rejects."""
        columns = []
        bads = []
        for name in table.column_names:
            raw = table.column(name).combine_chunks()
            text, mask = safe_cast(raw, pa.string())
            if mask.any():
                bads.append(Bad(name, mask, raw, "is not UTF-8 text", rule="encoding"))
            columns.append(text)
        return pa.Table.from_arrays(columns, names=table.column_names), bads


def _is_utf8(block: memoryview) -> bool:
    """Whether ``block`` is valid UTF-8 (Arrow's vectorized check, no copy)."""
    offsets = pa.py_buffer(np.array([0, len(block)], dtype=np.int64))
    array = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(block)])
    try:
        array.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


def _read_line(stream: IO[bytes], data: bytes, url: str) -> bytes:
    """``data`` extended from ``stream`` until it holds a whole line (or the stream ends)."""
    while b"\n" not in data:
        more = stream.read(1 << 16)
        if not more:
            break
        data += more
        _check_line(len(data), url)
    return data


def _check_line(length: int, url: str) -> None:
    """A line longer than ``MAX_LINE_BYTES`` means the input is not line-oriented text
    (or a decompression bomb): stop before it exhausts memory."""
    if length > MAX_LINE_BYTES:
        raise InputError(
            f"{url}: more than {MAX_LINE_BYTES >> 20} MiB without a line break; "
            "not a line-oriented text file (rule: max_line_bytes)"
        )


def _blocks(
    stream: IO[bytes], data: bytes, size: Callable[[], int], url: str, large: bool = False
) -> Iterator[memoryview]:
    """Cut ``data`` + the rest of ``stream`` into blocks of whole lines, ``size()`` bytes.

    Each block is read straight into a buffer of its own behind the partial last line of
    the block before (the only bytes copied). When the stream is known to be ``large``
    (more than a block), or once a read has filled its buffer, the buffers' pages are
    mapped when they are made (:func:`~ticktensor._memory.fresh_buffer`), not faulted in
    one by one by the read: on a VM, faults of fresh pages cost several times the read
    itself. Otherwise they are not: most of a block would be mapped for nothing when
    the file is small (200 files of 20 lines took 2.6 s with it mapped, 0.28 s without).
    """
    carry = memoryview(data)
    while True:
        length = len(carry) + max(size() - len(carry), 1 << 12)
        buffer = fresh_buffer((length,), np.uint8) if large else np.empty(length, np.uint8)
        buffer[: len(carry)] = np.frombuffer(carry, dtype=np.uint8)
        filled = len(carry) + _read_into(stream, buffer.data[len(carry) :])
        if filled == len(carry):
            if carry:
                yield carry
            return
        view = buffer.data[:filled]
        ended = filled < len(buffer)  # the buffer is filled unless the stream ended
        large = not ended
        cut = _last_line_break(view)
        if cut < 0:
            if ended:  # a last line without a line break
                yield view
                return
            _check_line(filled, url)
            carry = view
            continue
        yield view[: cut + 1]
        carry = view[cut + 1 :]
        if ended:  # no buffer for the read that would find nothing more
            if carry:
                yield carry
            return


def _mapped_blocks(
    file: MappedFile, start: int, size: Callable[[], int], url: str
) -> Iterator[memoryview]:
    """Cut ``file`` from ``start`` into blocks of whole lines, ``size()`` bytes, as
    :func:`_blocks` does a stream: each a view of a mapped window, nothing copied."""
    end = file.size
    while start < end:
        stop = min(start + max(size(), 1 << 12), end)
        window = file.window(start, stop)
        if stop == end:  # the last block; its last line may lack a break
            yield window.view(0, stop - start)
            return
        cut = window.rfind(b"\n")
        if cut < 0:  # a line longer than the block: up to its break, or the file's end
            limit = min(end, start + MAX_LINE_BYTES + 1)
            window = file.window(start, limit)
            cut = window.find(b"\n", stop - start)
            _check_line(cut if cut >= 0 else limit - start, url)
            if cut < 0:
                yield window.view(0, limit - start)
                return
        yield window.view(0, cut + 1)
        start += cut + 1


def _read_into(stream: IO[bytes], into: memoryview) -> int:
    """Fill ``into`` from ``stream``; fewer bytes only at the stream's end."""
    done = 0
    while done < len(into):
        n = stream.readinto(into[done:])  # type: ignore[attr-defined]
        if not n:
            break
        done += n
    return done


def _last_line_break(view: memoryview) -> int:
    """The position of the last ``\\n`` in ``view``, or -1; reads only its tail when the
    break is near the end, as it is in a block of text lines."""
    tail = 1 << 16
    while True:
        lo = max(0, len(view) - tail)
        found = bytes(view[lo:]).rfind(b"\n")
        if found >= 0:
            return lo + found
        if lo == 0:
            return -1
        tail *= 16


def _split(
    kind: EventKind,
    table: pa.Table,
    rows: npt.NDArray[np.int64],
    rejects: Rejects,
    options: ReadOptions,
) -> Iterator[EventBatch]:
    """Batches of at most ``batch_rows`` rows; the block's rejects ride on the first."""
    step = options.batch_rows
    table_rejects = rejects.table()
    for start in range(0, max(table.num_rows, 1), step):
        part = table.slice(start, step)
        if part.num_rows == 0 and table_rejects.num_rows == 0:
            return
        yield EventBatch(kind, part, rows[start : start + step], rejects=table_rejects)
        table_rejects = table_rejects.schema.empty_table()
