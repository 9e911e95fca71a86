// One element of a reply that is an array of structs or dict entries (ListMachines, and the
// machines of GetManagedObjects), marshalled once and kept while what it was marshalled from
// stays the same.
//
// 10,000 machines' elements held as buffers of their own were 20,000 small buffers, ArrayBuffer
// objects and malloc chunks (about 10 MiB) beside the 7 MB GetManagedObjects body they had been
// copied into. So an element is its copy in the last reply body joined from it; a body is kept
// while at least half of the elements joined into it still are their copies there, and once
// fewer are, those copy their bytes out and the body (a mapping of its own) is let go whole.

const NONE = Buffer.alloc(0);

/** A reply body and the elements joined into it. */
export class SharedBody {
  private live: number;

  constructor(readonly bytes: Buffer, private elements: readonly MarshalledElement[]) {
    this.live = elements.length;
  }

  /**
   * One element is no longer its copy here. `forNewerBody`: it joined a newer reply, which every
   * other element still here joins in the same pass, so copying them out would be wasted.
   */
  left(forNewerBody: boolean): void {
    this.live -= 1;
    if (forNewerBody || this.live * 2 > this.elements.length) return;
    const elements = this.elements;
    this.elements = [];
    for (const e of elements) if (e.isIn(this)) e.copyOut();
  }
}

export class MarshalledElement<S = unknown> {
  private shared: SharedBody | undefined;

  /** `source`: what the bytes were marshalled from, compared by identity to tell whether they are current. */
  constructor(readonly source: S, private body: Buffer, private at: number, readonly length: number) {}

  bytes(): Buffer {
    return this.body.subarray(this.at, this.at + this.length);
  }

  /** Copies the bytes into `shared` at `at`, and is that copy from now on. */
  joinInto(shared: SharedBody, at: number): void {
    this.bytes().copy(shared.bytes, at);
    const before = this.shared;
    this.body = shared.bytes;
    this.at = at;
    this.shared = shared;
    before?.left(true);
  }

  /** Its holder lets it go (stale, or its machine is gone); it must not be used again. */
  release(): void {
    const shared = this.shared;
    this.shared = undefined;
    this.body = NONE;
    this.at = 0;
    shared?.left(false);
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
