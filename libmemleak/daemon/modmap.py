"""Address -> loaded module, as it was when a stack was recorded.  A module
that was unloaded (dlclose) keeps its entry, and another may later occupy
the same addresses, so the answer depends on the stack's map epoch."""

import bisect


class ModuleMap:
    def __init__(self, modules):
        self._modules = sorted(modules, key=lambda m: m.lo)
        self._los = [m.lo for m in self._modules]
        self._widest = max((m.hi - m.lo for m in self._modules), default=0)

    def find(self, address, epoch):
        i = bisect.bisect_right(self._los, address) - 1
        while i >= 0 and address - self._los[i] < self._widest:
            m = self._modules[i]
            if m.lo <= address < m.hi and m.valid_at(epoch):
                return m
            i -= 1
        return None

    def only_one(self, address):
        """True if exactly one module, loaded or unloaded, covers address."""
        return self.sole(address) is not None

    def covers(self, address):
        """True if any module, loaded or unloaded, covers address."""
        i = bisect.bisect_right(self._los, address) - 1
        while i >= 0 and address - self._los[i] < self._widest:
            if self._modules[i].lo <= address < self._modules[i].hi:
                return True
            i -= 1
        return False

    def sole(self, address):
        """The module covering address if exactly one, loaded or unloaded,
        does (whenever the stack was recorded, the answer), else None."""
        i = bisect.bisect_right(self._los, address) - 1
        found = None
        while i >= 0 and address - self._los[i] < self._widest:
            m = self._modules[i]
            if m.lo <= address < m.hi:
                if found is not None:
                    return None
                found = m
            i -= 1
        return found
