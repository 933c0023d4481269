"""A fast decoder for DWARF line-number programs (versions 2 to 5).

pyelftools parses the header (file and directory tables); the opcodes are
run here in one tight loop over the raw bytes, several times faster than a
general decoder, which matters because big compile units hold hundreds of
thousands of rows.  Returns rows (address, file index, line, end_sequence)."""

DW_LNS_copy, DW_LNS_advance_pc, DW_LNS_advance_line, DW_LNS_set_file = 1, 2, 3, 4
DW_LNS_const_add_pc, DW_LNS_fixed_advance_pc = 8, 9
DW_LNE_end_sequence, DW_LNE_set_address = 1, 2


def decode_rows(data, header, address_size=8):
    """data: the opcode bytes of one program.  header: pyelftools' parsed
    line program header.  Raises IndexError/ValueError on truncated input."""
    opcode_base = header["opcode_base"]
    lengths = list(header["standard_opcode_lengths"])
    line_base = header["line_base"]
    line_range = header["line_range"]
    min_len = header["minimum_instruction_length"]
    default_file = 1
    rows = []
    append = rows.append
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
            append((address, file, line, False))
        elif op == 0:  # extended
            n = 0
            shift = 0
            while True:
                b = data[pos]
                pos += 1
                n |= (b & 0x7f) << shift
                shift += 7
                if b < 0x80:
                    break
            sub = data[pos]
            if sub == DW_LNE_end_sequence:
                append((address, file, line, True))
                address, file, line = 0, default_file, 1
            elif sub == DW_LNE_set_address:
                address = int.from_bytes(data[pos + 1:pos + 1 + address_size], "little")
            pos += n
        elif op == DW_LNS_copy:
            append((address, file, line, False))
        elif op == DW_LNS_advance_pc or op == DW_LNS_set_file or op == DW_LNS_advance_line:
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
    return rows
