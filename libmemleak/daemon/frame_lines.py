"""Frame tokens -> the lines a report writes for them, kept in the text
store once (a line id per frame token), and each stack key as a run of
line ids once all its frames are named.  A frame of a module is named by
the symbolizer; a frame no module holds -- JIT-compiled code -- from its
runtime's perf map (symbols/perfmap.py); a frame of our own library is
left out of reports."""

from array import array

from libmemleak.daemon.header_parts import SELF_LIBRARY
from libmemleak.daemon.report_core import extend_to
from libmemleak.daemon.stack_keys import unnamed_tokens
from libmemleak.daemon.python_code import PyFrame, as_frame, is_eval_loop, kind_of, merged_order
from libmemleak.files.memlog import Frame, render_frames

NOT_THE_PROGRAMS = -1  # a frame left out of reports: our own hooks'
UNNAMED = -2           # a token not named yet (stack_keys.c: not asked)


class FrameLines:
    def __init__(self, keys, texts, symbolizer, symbolize, kind_value, perf_map):
        """keys: the KeyTable; texts: the TextStore; symbolize: False to
        write module+offset (MEMLEAK_SYMBOLIZE=no); kind_value(kind, cut): what
        the entries of a key of that family (and cut or not) say of it; perf_map(): the process's PerfMap, made
        at the first frame that needs it."""
        self.keys, self.texts, self.symbolizer, self.symbolize = keys, texts, symbolizer, symbolize
        self.kind_value = kind_value
        self._make_perf_map, self._perf_map = perf_map, None
        # frame token -> line id; NOT_THE_PROGRAMS; UNNAMED (not asked, or
        # its text was this report's only); C reads it (stack_keys.c).
        self.token_line = array("i")
        self.python_token = bytearray()  # frame token -> 1: a Python frame or the evaluation loop's
        self.python_kinds = {}  # frame token -> "py"/"py-entry" (a Python frame) or "eval" (the loop's)
        texts.derive_from(keys, self.token_line)  # add_keys's keys are runs of token_line

    def known(self, token):
        """The line id of a token already named, else None."""
        line = self.token_line[token] if token < len(self.token_line) else UNNAMED
        return line if line >= NOT_THE_PROGRAMS else None

    def _named(self, token, line_id):
        extend_to(self.token_line, token + 1, UNNAMED)
        self.token_line[token] = line_id

    def symbolize_keys(self, key_ids):
        """Store the frame lines of these keys in the text store.  Keys with
        a frame the symbol budget cut short (or a JIT frame not named yet)
        are not stored; they are returned as (key id, [line id or text of
        each frame]), for the current report only.  Each frame new here is
        named once; keys of named native frames are stored in C."""
        extend_to(self.token_line, len(self.keys.frames), UNNAMED)
        self.python_token.extend(bytes(max(0, len(self.token_line) - len(self.python_token))))
        kind_byte = array("b", [self.kind_value(*kind) for kind in self.keys.kinds])
        key_ids = array("q", key_ids)
        for token in unnamed_tokens(self.keys, key_ids, self.token_line):
            self.token_line[token] = UNNAMED  # (asked: -4 meanwhile)
            self.line_of(token)
        left = self.texts.add_keys(self.keys, key_ids, self.token_line, self.python_token, kind_byte)
        texts, tokens_of, partial = self.texts, self.keys.tokens, []
        known, line_of = self.known, self.line_of
        for key_id in left:
            tokens = tokens_of(key_id)
            items = [known(t) for t in tokens]  # line ids: ints
            complete = True
            if None in items:
                items = [line_of(t) if x is None else x for t, x in zip(tokens, items)]
                complete = not any(type(x) is str for x in items)
            if self.python_kinds and not self.python_kinds.keys().isdisjoint(tokens):
                kinds = [self.python_kinds.get(t) for t in tokens]
                if "py" in kinds or "py-entry" in kinds:
                    items = [items[i] for i in merged_order(kinds)]
            if NOT_THE_PROGRAMS in items:
                items = [x for x in items if x != NOT_THE_PROGRAMS]
            if complete:
                texts.set_key(key_id, items, self.kind_value(self.keys.kind(key_id), self.keys.cut(key_id)))
            else:
                partial.append((key_id, items))
        self.symbolizer.save()  # a successor starts from these (symbols/answer_cache.py)
        return partial

    def line_of(self, token):
        """The line id of the frame lines of this frame token; their text if
        not to be kept (symbolization cut short, a JIT frame not named yet);
        NOT_THE_PROGRAMS for a frame of our own library (e.g. our dlopen
        hook)."""
        module, address, _ = self.keys.frames[token]
        if type(address) is PyFrame:
            return self.python_line(token, address)
        if module is None:
            return self.jit_line(token, address)
        if module.path.endswith("/" + SELF_LIBRARY):
            line_id = NOT_THE_PROGRAMS
        elif not self.symbolize:
            line_id = self.texts.add_line(render_frames([Frame(None, module.path, address - module.base)]))
        else:
            skipped = self.symbolizer.skipped
            frames = self.symbolizer.frames_for(module, address)
            if is_eval_loop(frames):
                self._python(token, "eval")
            text = render_frames(frames)
            if self.symbolizer.skipped != skipped:
                return text
            line_id = self.texts.add_line(text)
        self._named(token, line_id)
        return line_id

    def jit_line(self, token, address):
        """A frame no module holds: named from the perf map -- kept once
        named; while unnamed, its address, asked again at the next report
        (the runtime may have named it by then)."""
        if self._perf_map is None:
            self._perf_map = self._make_perf_map()
        found = self._perf_map.frame_at(address)
        if found is None:
            return render_frames([Frame(None, None, address)])
        line_id = self.texts.add_line(render_frames([Frame(found[0], self._perf_map.shown, found[1])]))
        self._named(token, line_id)
        return line_id

    def python_line(self, token, frame):
        """A Python frame: its function, "(python)" as its module, its
        file and line (docs/memlog.md)."""
        self._python(token, kind_of(frame))
        line_id = self.texts.add_line(render_frames([as_frame(frame)]))
        self._named(token, line_id)
        return line_id

    def _python(self, token, kind):
        """A Python frame's token, or the evaluation loop's: merged in Python."""
        self.python_kinds[token] = kind
        self.python_token.extend(bytes(max(0, token + 1 - len(self.python_token))))
        self.python_token[token] = 1
