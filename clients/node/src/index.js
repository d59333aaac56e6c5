// queenside: the Node client of the queenside sidecar.
export { Client, connect, CLIENT_NAME, DEFAULT_QUEUE_OPTIONS, PROTOCOL_VERSION } from './client.js';
export { MessageIterator } from './message-iterator.js';
export { AckError } from './ack-batcher.js';
export { completed, failed } from './items.js';
export { ackTx, pushTx } from './tx.js';
export { DEFAULT_RETRY } from './retry.js';
export { QUEUE_OPTIONS } from './queue-options.js';
export { CODES } from './codes.js';
export { transactionId } from './transaction-id.js';
export { ACK_ITEM_CODES } from './ack-codes.js';
export { defaultSocketPath, DEFAULT_SOCKET, DEV_SOCKET } from './socket-path.js';
export { PreciseDate } from './codec/precise-date.js';
export { RawMsgpack } from './codec/raw.js';
export { encode } from './codec/encode.js';
export { decode } from './codec/decode.js';
export { decodeEnvelope, encodeEnvelope } from './codec/envelope.js';
export { FrameReader } from './codec/frame-reader.js';
export {
  Codes,
  ERROR_CLASSES,
  QueensideError,
  ConnectionError,
  BadRequestError,
  FrameTooLargeError,
  UnknownOpError,
  UnsupportedError,
  InvalidArgumentError,
  NotFoundError,
  ConflictError,
  LeaseExpiredError,
  UnavailableError,
  SpoolFullError,
  DrainingError,
  OverloadedError,
  DeadlineExceededError,
  UnauthorizedError,
  KeyMissingError,
  PermissionDeniedError,
  ForbiddenError,
  InternalError,
} from './errors.js';
