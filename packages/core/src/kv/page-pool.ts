import { InvalidArgumentError } from '../errors.js';

/**
 * The host side of the KV page pool: which pages are free, which are held (and by how many
 * sequences: a cached prefix block is shared), and which full blocks are known by the hash of
 * their content (prefix caching). A page whose last holder let go keeps its content and its
 * hash, as a cached block, until the pool needs it for something else: cached blocks are
 * reclaimed least recently released first.
 */
export class PagePool {
  readonly pages: number;
  readonly #refs: Int32Array;
  readonly #hashOf: (string | undefined)[];
  readonly #byHash = new Map<string, number>();
  /** Pages with no holder and no hash; the last one is handed out first. */
  readonly #free: number[];
  /** Pages with no holder but a hash, in release order (the first is reclaimed first). */
  readonly #cached = new Set<number>();

  constructor(pages: number) {
    if (!Number.isSafeInteger(pages) || pages < 1) throw new InvalidArgumentError(`kv cache: the page pool needs at least one page, got ${pages}`);
    this.pages = pages;
    this.#refs = new Int32Array(pages);
    this.#hashOf = new Array<string | undefined>(pages).fill(undefined);
    this.#free = Array.from({ length: pages }, (_, i) => pages - 1 - i);
  }

  /** Pages a sequence could get now: free ones and cached ones nobody holds. */
  get available(): number {
    return this.#free.length + this.#cached.size;
  }

  /** Pages some sequence holds. */
  get held(): number {
    return this.pages - this.available;
  }

  /** Full blocks known by hash (held or not). */
  get cachedBlocks(): number {
    return this.#byHash.size;
  }

  /** A page for a new block, held once: a free one, else the least recently released cached one (its hash is forgotten). */
  allocate(): number {
    let page = this.#free.pop();
    if (page === undefined) {
      const oldest = this.#cached.values().next();
      if (oldest.done) throw new InvalidArgumentError(`kv cache: all ${this.pages} pages are held; check available before allocating`);
      page = oldest.value;
      this.#cached.delete(page);
      this.#byHash.delete(this.#hashOf[page]!);
      this.#hashOf[page] = undefined;
    }
    this.#refs[page] = 1;
    return page;
  }

  /** One more holder of `page` (a sequence sharing a cached block). */
  retain(page: number): void {
    this.#check(page);
    if (this.#refs[page] === 0) {
      if (!this.#cached.delete(page)) throw new InvalidArgumentError(`kv cache: page ${page} is free; only a held or cached page can be shared`);
    }
    this.#refs[page]!++;
  }

  /** One holder fewer; a page nobody holds becomes free, or cached when its block has a hash. */
  release(page: number): void {
    this.#check(page);
    if (this.#refs[page]! < 1) throw new InvalidArgumentError(`kv cache: page ${page} is released more often than it was held`);
    if (--this.#refs[page]! > 0) return;
    if (this.#hashOf[page] !== undefined) this.#cached.add(page);
    else this.#free.push(page);
  }

  /**
   * Records that held `page` holds the full block whose content hashes to `hash`. A hash already
   * known keeps its page (this one stays anonymous); returns whether the page was recorded.
   */
  register(page: number, hash: string): boolean {
    this.#check(page);
    if (this.#refs[page]! < 1) throw new InvalidArgumentError(`kv cache: page ${page} is not held; only a held page's block can be registered`);
    if (this.#byHash.has(hash) || this.#hashOf[page] !== undefined) return false;
    this.#byHash.set(hash, page);
    this.#hashOf[page] = hash;
    return true;
  }

  /** The page holding the block of `hash`, held or cached. */
  lookup(hash: string): number | undefined {
    return this.#byHash.get(hash);
  }

  holders(page: number): number {
    this.#check(page);
    return this.#refs[page]!;
  }

  #check(page: number): void {
    if (!Number.isInteger(page) || page < 0 || page >= this.pages) throw new InvalidArgumentError(`kv cache: page ${page} is not in 0..${this.pages - 1}`);
  }
}
