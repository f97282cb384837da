// The ELF reading of scripts/same-sass.mjs on small files built here (nvcc is not on CI).
import { describe, expect, it } from 'vitest';
import { differingSections, elfSections } from './same-sass.mjs';

/** A 64-bit little-endian ELF file with the named sections (a null one first, the names' table last). */
function elf(sections) {
  const named = [...Object.entries(sections), ['.shstrtab', null]];
  let strtab = '\0';
  const nameOffsets = named.map(([name]) => {
    const at = strtab.length;
    strtab += `${name}\0`;
    return at;
  });
  const datas = named.map(([, data]) => (data === null ? Buffer.from(strtab, 'latin1') : Buffer.from(data)));
  let offset = 64;
  const offsets = datas.map((d) => {
    const at = offset;
    offset += d.length;
    return at;
  });
  const shoff = offset, shnum = named.length + 1;
  const buf = Buffer.alloc(shoff + shnum * 64);
  buf.writeUInt32BE(0x7f454c46, 0);
  buf[4] = 2, buf[5] = 1, buf[6] = 1;
  buf.writeBigUInt64LE(BigInt(shoff), 0x28);
  buf.writeUInt16LE(64, 0x3a), buf.writeUInt16LE(shnum, 0x3c), buf.writeUInt16LE(shnum - 1, 0x3e);
  datas.forEach((d, i) => {
    d.copy(buf, offsets[i]);
    const at = shoff + (i + 1) * 64;
    buf.writeUInt32LE(nameOffsets[i], at);
    buf.writeUInt32LE(named[i][1] === null ? 3 : 1, at + 4);
    buf.writeBigUInt64LE(BigInt(offsets[i]), at + 0x18);
    buf.writeBigUInt64LE(BigInt(d.length), at + 0x20);
  });
  return buf;
}

describe('same-sass', () => {
  it("reads an ELF file's sections by name", () => {
    const s = elfSections(elf({ '.text.k': [1, 2, 3], '.nv.info.k': [9] }));
    expect([...s.keys()]).toEqual(['.text.k', '.nv.info.k', '.shstrtab']);
    expect([...s.get('.text.k')]).toEqual([1, 2, 3]);
  });

  it('finds the sections that differ, and those in one file only', () => {
    const base = elfSections(elf({ '.text.a': [1, 2], '.text.b': [3], '.text.gone': [4] }));
    const change = elfSections(elf({ '.text.a': [1, 2], '.text.b': [5, 6], '.text.new': [7] }));
    expect(differingSections(base, base)).toEqual([]);
    expect(differingSections(base, change)).toEqual([
      { name: '.shstrtab', why: 'differs (38 → 37 bytes)' },
      { name: '.text.b', why: 'differs (1 → 2 bytes)' },
      { name: '.text.gone', why: 'only in the base' },
      { name: '.text.new', why: 'only in the change' },
    ]);
  });

  it('refuses a file that is not a 64-bit little-endian ELF', () => {
    expect(() => elfSections(Buffer.from('#!/bin/sh\necho not a cubin\n'.padEnd(80)))).toThrow(/not a 64-bit little-endian ELF/);
    const truncated = elf({ '.text.k': [1] }).subarray(0, 70);
    expect(() => elfSections(truncated)).toThrow(/section table out of the file/);
  });
});
