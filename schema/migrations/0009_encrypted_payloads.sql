-- queenside storage, version 9: encrypted payloads.
--
-- A queue with encrypt_payloads has the payloads of the messages pushed
-- while it is set sealed by the sidecar (AES-256-GCM, sidecar/crypt): the
-- stored payload is then a sealed record, which names its key and starts
-- with a byte no msgpack value starts with, so each message says whether
-- and under which key it was sealed, whatever the queue's setting is now.
-- Sidecars of version 8 ignore the setting.
ALTER TABLE queenside.queues ADD COLUMN encrypt_payloads boolean NOT NULL DEFAULT false;
