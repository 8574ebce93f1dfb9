/** A bad form or query: answered 400 with a message naming the field; nothing is changed. */
export class FormError extends Error {}
