import { crc32 } from 'node:zlib';

// One journal entry on disk: [u32 length][u32 crc32 of the payload][payload], little-endian.
// A crash mid-write leaves a torn last frame, which the reader recognises and drops.

const HEADER = 8;
/** An entry larger than this is a corrupt length field, not an event. */
export const MAX_FRAME_PAYLOAD = 1 << 20;

export function encodeFrame(payload: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(HEADER + payload.length);
  frame.writeUInt32LE(payload.length, 0);
  frame.writeUInt32LE(crc32(payload), 4);
  payload.copy(frame, HEADER);
  return frame;
}

export interface DecodedFrames {
  payloads: Buffer[];
  /** Bytes of whole, intact frames from the start; anything after is a torn or corrupt tail. */
  validBytes: number;
}

export function decodeFrames(data: Buffer): DecodedFrames {
  const payloads: Buffer[] = [];
  let at = 0;
  while (at + HEADER <= data.length) {
    const length = data.readUInt32LE(at);
    if (length > MAX_FRAME_PAYLOAD || at + HEADER + length > data.length) break;
    const payload = data.subarray(at + HEADER, at + HEADER + length);
    if (crc32(payload) !== data.readUInt32LE(at + 4)) break;
    payloads.push(payload);
    at += HEADER + length;
  }
  return { payloads, validBytes: at };
}
