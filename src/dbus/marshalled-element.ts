// One element of a reply that is an array of structs or dict entries (ListMachines, and the
// machines of GetManagedObjects), marshalled once and kept while what it was marshalled from
// stays the same.
//
// 10,000 machines' elements held as buffers of their own were 20,000 small buffers, ArrayBuffer
// objects and malloc chunks (about 10 MiB) beside the 7 MB GetManagedObjects body they had been
// copied into. So an element is its copy in the last reply body joined from it; a body is kept
// while more than half of the elements joined into it still are their copies there, and once
// half or fewer are, those copy their bytes out and the body (a mapping of its own) is let go whole.

const NO_BYTES = Buffer.alloc(0);

/** A reply body and the elements joined into it. */
export class SharedBody {
  private live: number;

  constructor(readonly bytes: Buffer, private elements: readonly MarshalledElement[]) {
    this.live = elements.length;
  }

  /**
   * One element joined a newer reply body. Every other element still here joins it in the same
   * pass (a rebuild takes every current element), so copying them out would be wasted.
   */
  movedOn(): void {
    this.live -= 1;
  }

  /** One element was let go (stale, or its machine is gone); at half live the rest copy out. */
  dropped(): void {
    this.live -= 1;
    if (this.live * 2 > this.elements.length) return;
    const elements = this.elements;
    this.elements = [];
    for (const e of elements) if (e.isIn(this)) e.copyOut();
  }
}

export class MarshalledElement<S = unknown> {
  private shared: SharedBody | undefined;
  private released = false;

  /** `source`: what the bytes were marshalled from, compared by identity to tell whether they are current. */
  constructor(readonly source: S, private body: Buffer, private at: number, readonly length: number) {}

  bytes(): Buffer {
    // A released element in a reply would leave its slot zero-filled: a body the bus refuses.
    if (this.released) throw new Error('a released marshalled element was used');
    return this.body.subarray(this.at, this.at + this.length);
  }

  /** Copies the bytes into `shared` at `at`, and is that copy from now on. */
  joinInto(shared: SharedBody, at: number): void {
    const before = this.shared;
    if (before === shared) throw new Error('a marshalled element was joined into the same body twice');
    this.bytes().copy(shared.bytes, at);
    this.body = shared.bytes;
    this.at = at;
    this.shared = shared;
    before?.movedOn();
  }

  /** Its holder lets it go (stale, or its machine is gone); using it again throws. */
  release(): void {
    if (this.released) return;
    const shared = this.shared;
    this.released = true;
    this.shared = undefined;
    this.body = NO_BYTES;
    shared?.dropped();
  }

  isIn(shared: SharedBody): boolean {
    return this.shared === shared;
  }

  /** Takes a copy of its own (unpooled: a pooled one would keep an 8 KiB slab alive). */
  copyOut(): void {
    const own = Buffer.allocUnsafeSlow(this.length);
    this.bytes().copy(own);
    this.body = own;
    this.at = 0;
    this.shared = undefined;
  }
}
