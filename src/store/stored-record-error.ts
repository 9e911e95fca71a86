/** Why a stored record is refused; the message is the quarantine reason and never quotes content. */
export class InvalidStoredRecord extends Error {}
