#!/usr/bin/env node
// Every docs reference in the repository resolves to a file in the repository: the links of
// every *.md file, the docs paths (`*.md`, `docs/…`) its text cites, and the docs paths that
// source comments cite. `node scripts/docs-links.mjs` prints each broken one and exits 1;
// scripts/docs-links.test.mjs runs the same check in `npm test`.
//
// How a reference resolves:
// - a Markdown link `[text](target)`: relative to the file that holds it, as a Markdown viewer does;
// - a cited path (`README.md`, `docs/architecture.md`, `../README.md`): `./` and `../` paths
//   relative to the citing file; other paths from the citing file's folder or any folder above
//   it, up to the repository root (so from a file deep in a package, `README.md` is the package's
//   own and `docs/fixtures.md` the root's).
// A target outside the repository is broken even where it exists on this machine.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, extname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Folders never scanned (installs and build outputs). */
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', '.turbo', 'build', 'bench-results']);

/** Sources whose comments are scanned: `//` and `/* … *\/` comments. */
const C_LIKE = new Set(['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs', '.cu', '.cuh', '.c', '.cc', '.cpp', '.h', '.hpp']);
/** Sources whose `#` comments (and, for Python, docstrings) are scanned. */
const HASH_LIKE = new Set(['.py', '.sh']);

/** Files to scan: what git tracks or would add (not ignored) in a git checkout, else every file below `root`. */
export function repoFiles(root) {
  if (existsSync(join(root, '.git'))) {
    const out = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8', maxBuffer: 64 << 20 });
    return out
      .split('\0')
      .filter((f) => f && !f.split('/').some((part) => SKIP_DIRS.has(part)))
      .filter((f) => existsSync(join(root, f)))
      .sort();
  }
  const files = [];
  const walk = (dir) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      if (entry.isDirectory()) {
        if (!SKIP_DIRS.has(entry.name)) walk(dir ? `${dir}/${entry.name}` : entry.name);
      } else if (entry.isFile()) files.push(dir ? `${dir}/${entry.name}` : entry.name);
    }
  };
  walk('');
  return files.sort();
}

/** The end of the string literal that opens at `i` (quote `q`): past its closing quote, or its line. */
function stringEnd(text, i, q) {
  for (let j = i + 1; j < text.length; j++) {
    const c = text[j];
    if (c === '\\') j++;
    else if (c === q) return j + 1;
    else if (c === '\n' && q !== '`') return j + 1;
  }
  return text.length;
}

/**
 * The comment text of a source file, everything else blanked so line numbers stay: `//` and
 * `/* … *\/` comments (C-like sources), `#` comments and, in Python, triple-quoted docstrings.
 * String literals are skipped, so a `//` or `#` inside one starts no comment.
 */
export function commentText(text, ext) {
  const cLike = C_LIKE.has(ext);
  if (!cLike && !HASH_LIKE.has(ext)) return '';
  const keep = new Uint8Array(text.length);
  const mark = (from, to) => keep.fill(1, from, to);
  const lineEnd = (i) => {
    const e = text.indexOf('\n', i);
    return e < 0 ? text.length : e;
  };
  for (let i = 0; i < text.length; ) {
    const c = text[i];
    const two = text.slice(i, i + 2);
    const three = text.slice(i, i + 3);
    let end;
    if (cLike && two === '//') mark(i, (end = lineEnd(i)));
    else if (cLike && two === '/*') {
      const e = text.indexOf('*/', i + 2);
      mark(i, (end = e < 0 ? text.length : e + 2));
    } else if (!cLike && c === '#') mark(i, (end = lineEnd(i)));
    else if (ext === '.py' && (three === '"""' || three === "'''")) {
      const e = text.indexOf(three, i + 3);
      mark(i, (end = e < 0 ? text.length : e + 3));
    } else if (c === '"' || c === "'" || (cLike && c === '`')) end = stringEnd(text, i, c);
    else end = i + 1;
    i = end;
  }
  let out = '';
  for (let i = 0; i < text.length; i++) out += keep[i] || text[i] === '\n' ? text[i] : ' ';
  return out;
}

const URL_RE = /\b[a-z][a-z0-9+.-]*:\/\/\S+/gi;
/** A cited docs path: a path ending in `.md`, or one starting with `docs/`. */
const CITED_RE = /(?<![\w/.@~-])((?:\.{1,2}\/)*(?:[\w-][\w.-]*\/)*[\w-][\w.-]*\.md|(?:\.{1,2}\/)*docs\/[\w./-]*[\w-])(?![\w/-])/g;
const LINK_RE = /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm;

function lineOf(text, index) {
  let line = 1;
  for (let i = 0; i < index; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

function inside(root, path) {
  const rel = relative(root, path);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

/** Whether a cited path resolves from `fromDir` (see the header); undefined when it does, else why not. */
function resolveCited(root, fromDir, ref) {
  if (ref.startsWith('./') || ref.startsWith('../')) {
    const target = resolve(fromDir, ref);
    if (!inside(root, target)) return 'outside the repository';
    return existsSync(target) ? undefined : 'no such file';
  }
  for (let dir = fromDir; ; dir = dirname(dir)) {
    if (existsSync(join(dir, ref))) return undefined;
    if (dir === root || !inside(root, dirname(dir))) return 'no such file here or in any folder above, up to the repository root';
  }
}

function resolveLink(root, fromDir, target) {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#')) return undefined;
  const path = decodeURI(target.replace(/[?#].*$/, ''));
  if (!path) return undefined;
  const abs = path.startsWith('/') ? join(root, path) : resolve(fromDir, path);
  if (!inside(root, abs)) return 'outside the repository';
  return existsSync(abs) ? undefined : 'no such file';
}

/**
 * Every broken docs reference below `root`: `{ file, line, ref, kind: 'link' | 'cited', why }`,
 * `file` relative to `root`, sorted by file and line.
 */
export function findBrokenDocRefs(root, files = repoFiles(root)) {
  root = resolve(root);
  const broken = [];
  for (const file of files) {
    const ext = extname(file).toLowerCase();
    const isMd = ext === '.md';
    if (!isMd && !C_LIKE.has(ext) && !HASH_LIKE.has(ext)) continue;
    const abs = join(root, file);
    const raw = readFileSync(abs, 'utf8');
    const text = (isMd ? raw : commentText(raw, ext)).replace(URL_RE, (u) => ' '.repeat(u.length));
    const fromDir = dirname(abs);
    const seen = new Set();
    const report = (index, ref, kind, why) => {
      const line = lineOf(text, index);
      const key = `${line}:${ref}`;
      if (why === undefined || seen.has(key)) return;
      seen.add(key);
      broken.push({ file, line, ref, kind, why });
    };
    if (isMd) {
      for (const m of raw.matchAll(LINK_RE)) {
        const target = m[1] ?? m[2];
        report(m.index, target, 'link', resolveLink(root, fromDir, target));
      }
    }
    for (const m of text.matchAll(CITED_RE)) report(m.index, m[1], 'cited', resolveCited(root, fromDir, m[1]));
  }
  return broken.sort((a, b) => (a.file === b.file ? a.line - b.line : a.file < b.file ? -1 : 1));
}

export function describeBroken(b) {
  return `${b.file}:${b.line}: ${b.kind === 'link' ? 'link' : 'cited path'} ${b.ref}: ${b.why}`;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(process.argv[2] ?? join(dirname(fileURLToPath(import.meta.url)), '..'));
  const broken = findBrokenDocRefs(root);
  for (const b of broken) console.log(describeBroken(b));
  console.log(broken.length ? `${broken.length} broken docs reference(s)` : 'every docs reference resolves');
  process.exit(broken.length ? 1 : 0);
}
