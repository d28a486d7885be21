"""Point an ELF file's glibc version requirements (e.g. GLIBC_2.38) at a version the host's glibc has.

scripts/setup/apptainer.sh runs it on Debian sid's Apptainer binaries on an older glibc, after patchelf
has cleared the version of the only symbols that needed the newer one and linked in a shim that defines
them: the loader then still checks every version requirement of the file, so the requirement itself must
name a version libc.so.6 provides. Each named requirement takes the name and hash of the first other
requirement on the same library (all of which the host's glibc has, or the file would not load anyway).

    python3 elf_versions.py FILE GLIBC_2.38 [...]    # prints each rewrite; exit 1 if a name is not there
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

SHT_GNU_VERNEED = 0x6FFFFFFE


def rewrite_requirements(data: bytearray, names: set[str]) -> list[str]:
    """Rewrite, in place, the version requirements in `names` of the 64-bit little-endian ELF `data`."""
    if data[:6] != b"\x7fELF\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    (section_offset,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, section_offset + i * entry_size) for i in range(count)]
    done: list[str] = []
    for _name, kind, _flags, _addr, offset, _size, link, *_ in sections:
        if kind != SHT_GNU_VERNEED:
            continue
        strings = sections[link][4]

        def string(at: int, base: int = strings) -> str:
            return data[base + at : data.index(b"\0", base + at)].decode()

        while True:
            _version, aux_count, _file, aux_offset, next_offset = struct.unpack_from("<HHIII", data, offset)
            entries, aux = [], offset + aux_offset
            for _ in range(aux_count):
                hash_, _aux_flags, _other, name_at, aux_next = struct.unpack_from("<IHHII", data, aux)
                entries.append((aux, hash_, name_at, string(name_at)))
                aux += aux_next
            kept = [entry for entry in entries if entry[3] not in names]
            for at, _hash, _name_at, name in entries:
                if name in names:
                    if not kept:
                        raise ValueError(f"{name} is the only requirement on its library: nothing to point it at")
                    struct.pack_into("<I", data, at, kept[0][1])
                    struct.pack_into("<I", data, at + 8, kept[0][2])
                    done.append(f"{name} -> {kept[0][3]}")
            if not next_offset:
                break
            offset += next_offset
    return done


def main(argv: list[str]) -> int:
    path, names = Path(argv[1]), set(argv[2:])
    data = bytearray(path.read_bytes())
    done = rewrite_requirements(data, names)
    if len(done) < len(names):
        print(f"elf_versions: {path}: not all of {sorted(names)} are version requirements here", file=sys.stderr)
        return 1
    path.write_bytes(bytes(data))
    print(f"{path.name}: {', '.join(done)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
