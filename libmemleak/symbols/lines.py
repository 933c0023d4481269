"""A fast decoder for DWARF line-number programs (versions 2 to 5).

pyelftools parses the header (file and directory tables); the opcodes are
run here in one tight loop over the raw bytes, several times faster than a
general decoder, which matters because big compile units hold hundreds of
thousands of rows.

Rows go into three flat arrays (address, file number, line), 24 bytes a
row, where a list of tuples took about 150: a reporter symbolizing a few
hundred frames of libpython decodes 600,000 rows.  An end of sequence is
a row with file number END."""

from array import array

from libmemleak.symbols.dwarf_forms import uleb

END = -1

DW_LNS_copy, DW_LNS_advance_pc, DW_LNS_advance_line, DW_LNS_set_file = 1, 2, 3, 4
DW_LNS_const_add_pc, DW_LNS_fixed_advance_pc = 8, 9
DW_LNE_end_sequence, DW_LNE_set_address = 1, 2


def decode_rows(data, header, address_size=8):
    """data: the opcode bytes of one program.  header: pyelftools' parsed
    line program header.  Returns (addresses, files, lines, sequences):
    three arrays of rows in program order and the (first, end) row index
    of each sequence.  Raises IndexError/ValueError/OverflowError on
    truncated or absurd input."""
    opcode_base = header["opcode_base"]
    lengths = list(header["standard_opcode_lengths"])
    line_base = header["line_base"]
    line_range = header["line_range"]
    min_len = header["minimum_instruction_length"]
    default_file = 1
    addrs, files, lines = array("Q"), array("q"), array("q")
    add_addr, add_file, add_line = addrs.append, files.append, lines.append
    sequences = []
    seq_start = 0
    address, file, line = 0, default_file, 1
    pos, end = 0, len(data)
    special_adjust = 255 - opcode_base
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= opcode_base:
            adj = op - opcode_base
            address += (adj // line_range) * min_len
            line += line_base + adj % line_range
            add_addr(address)
            add_file(file)
            add_line(line)
        elif op == 0:  # extended
            n, pos = uleb(data, pos)
            sub = data[pos]
            if sub == DW_LNE_end_sequence:
                add_addr(address)
                add_file(END)
                add_line(line)
                sequences.append((seq_start, len(addrs)))
                seq_start = len(addrs)
                address, file, line = 0, default_file, 1
            elif sub == DW_LNE_set_address:
                address = int.from_bytes(data[pos + 1:pos + 1 + address_size], "little")
            pos += n
        elif op == DW_LNS_copy:
            add_addr(address)
            add_file(file)
            add_line(line)
        elif op == DW_LNS_advance_pc or op == DW_LNS_set_file or op == DW_LNS_advance_line:
            # (LEB128 read inline, not by a call to dwarf_forms.uleb/sleb:
            # these opcodes come with most rows, and this loop is the
            # largest single cost of a cold symbolization)
            v = 0
            shift = 0
            while True:
                b = data[pos]
                pos += 1
                v |= (b & 0x7f) << shift
                shift += 7
                if b < 0x80:
                    break
            if op == DW_LNS_advance_line:
                if b & 0x40:
                    v -= 1 << shift
                line += v
            elif op == DW_LNS_advance_pc:
                address += v * min_len
            else:
                file = v
        elif op == DW_LNS_const_add_pc:
            address += (special_adjust // line_range) * min_len
        elif op == DW_LNS_fixed_advance_pc:
            address += data[pos] | data[pos + 1] << 8
            pos += 2
        else:  # other standard opcodes: skip their ULEB operands
            for _ in range(lengths[op - 1]):
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
    if seq_start < len(addrs):  # rows after the last end_sequence: a truncated program
        sequences.append((seq_start, len(addrs)))
    return addrs, files, lines, sequences
