/** The handler's response as idem captured it: status, every header, and the body bytes. */
export interface CapturedResponse {
  status: number;
  /** Lower-case names; a header sent several times (Set-Cookie) appears several times. */
  headers: [string, string][];
  body: Uint8Array;
}
