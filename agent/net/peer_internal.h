/* peer_internal.h - what peer.c, peer_listener.c, peer_stream.c and
 * peer_seal.c share: deadlines, the non-blocking frame engine, socket
 * set-up and encrypted connections' state.  Not part of the peer API:
 * only agent/ (ring.c) and the peer fuzz target and its seed maker use it.
 *
 * Sockets stay in blocking mode (tests and callers may write on them
 * directly); every send and receive here passes MSG_DONTWAIT and waits in
 * poll() only when the kernel says EAGAIN, so a fast link costs no poll. */
#ifndef SHOAL_AGENT_PEER_INTERNAL_H
#define SHOAL_AGENT_PEER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "peer.h"

/* Errors are 502 (the peer misbehaved or went away) or 504 (timeout). */
#define PEER_STATUS 502
#define PEER_STATUS_TIMEOUT 504

/* A frame payload is received in pieces of at most this many bytes, each
 * CRC'd right after it lands, while it is still in cache. */
#ifndef PEER_RX_PIECE
#define PEER_RX_PIECE (256u << 10)
#endif

/* Limits of one blocking exchange: deadline on CLOCK_MONOTONIC (ms, -1 never),
 * the timeout it came from (ms, for messages), and an fd whose readability
 * means "give up now" (-1 none). */
struct peer_io {
    int64_t deadline_ms;
    int timeout_ms;
    int cancel_fd;
};

/* peer_send on an encrypted connection seals the payload into a buffer of
 * the connection's this many bytes at a time, each piece sent while it is
 * still in cache. */
#ifndef PEER_SEAL_PIECE
#define PEER_SEAL_PIECE (256u << 10)
#endif

/* An encrypted connection's state (common/wire.h, "Sealed connections").
 * The sending side (tx, tx_frames, scratch) belongs to the one thread that
 * sends, the receiving side to the one that receives. */
struct peer_seal {
    struct aead *tx, *rx;     /* our direction's key, sealing; theirs, opening */
    uint64_t tx_frames;       /* number of the next frame we send */
    uint64_t rx_frames;       /* number of the next frame we expect */
    unsigned char *scratch;   /* PEER_SEAL_PIECE bytes */
    int rx_failed;            /* a frame failed its tag: nothing more is read */
};

/* One frame going out: header and payload as iovecs (no copy).  On an
 * encrypted connection the header carries its tag, and the payload is
 * either sealed already (a stream's slot) or sealed here piece by piece
 * into the seal's scratch (`plain` set), followed by the payload tag. */
struct peer_tx {
    struct peer_conn *c;
    unsigned char hdr[WIRE_SEALED_HEADER_BYTES];
    unsigned char tag[WIRE_TAG_BYTES];
    struct iovec iov[3];
    int first, iovcnt;        /* iov[first .. first+iovcnt) is still to go */
    int done;
    const unsigned char *plain; /* payload still to seal from, or NULL */
    uint64_t plain_len, plain_off; /* bytes: the payload's, sealed so far */
};

/* One frame coming in: the header first, then (when `payload` is set) the
 * payload, CRC'd as it arrives.  With header_only the exchange stops after a
 * checked header so the caller can pick a buffer; with pause_at it stops
 * when that many payload bytes are in (the caller may then move them and
 * point `payload` elsewhere; the offset stays `got`); with discard the
 * payload is read into `payload` (discard bytes long) over and over, and
 * dropped. */
struct peer_rx {
    struct peer_conn *c;
    struct wire_frame *f;
    uint64_t payload_max;     /* bytes; headers announcing more are refused */
    int check_binding;        /* frame job/epoch must be the connection's */
    int header_only;
    uint64_t pause_at;        /* payload bytes; >0: return early once this many are in */
    size_t discard;           /* bytes of scratch in payload; 0: keep the payload */
    void *payload;
    unsigned char hdr[WIRE_SEALED_HEADER_BYTES]; /* header, and its tag when sealed */
    size_t hdr_got;
    uint64_t got;             /* payload bytes */
    uint32_t crc;
    int stage;                /* 0 header, 1 payload, 2 done */
    int sealed;               /* the connection is encrypted: decrypt in place */
    unsigned char tag[WIRE_TAG_BYTES]; /* the payload's, read after it */
    size_t tag_got;
};

#define PEER_NEVER (INT64_MAX / 4) /* a deadline (ms) that never comes */

int64_t peer_now_ms(void);
/* Deadline timeout_ms from now; timeout_ms < 0: PEER_NEVER. */
int64_t peer_deadline(int timeout_ms);
/* timeout_ms < 0: no deadline. */
struct peer_io peer_io_make(int timeout_ms, int cancel_fd);

/* Sets TCP_NODELAY and close-on-exec; buffer sizes stay with the kernel's
 * autotuning (see peer.c).  Failures are ignored: they only cost speed. */
void peer_socket_tune(int fd);

struct addrinfo;
/* Resolves "host:port" / "[v6]:port" (host "" or "*" with passive: any).
 * An address to connect to (!passive) is checked as it resolves
 * (hostport_resolve): one of a refused class is "address_refused" (422).
 * Free *out with freeaddrinfo. */
int peer_resolve(const char *addr, int passive, struct addrinfo **out, struct shoal_err *err);

/* "host:port" of the socket's remote end ("?" when unknown). */
void peer_format_addr(const void *sa, unsigned salen, char *out, size_t out_len);

/* Copies bytes into out as printable text (others become '?'), in quotes,
 * truncated with "..." to fit. */
void peer_quote(const void *p, size_t n, char *out, size_t out_len);


#define ERROR_TEXT_MAX 512 /* bytes of a WIRE_ERROR reason read during a handshake */

/* Fills buf from getrandom(). */
int peer_random(void *buf, size_t n, struct shoal_err *err);

/* Wipes and frees a seal; NULL is ignored. */
void peer_seal_free(struct peer_seal *s);

/* Moves a connection (socket and seal) from src to dst; src is left
 * closed. */
void peer_conn_move(struct peer_conn *dst, struct peer_conn *src);

/* Makes c an encrypted connection after a handshake that agreed on it:
 * derives the session keys from the link's key, a's job and epoch and both
 * nonces and roles (wire_session_keys); `dialer` says which end we are.
 * Returns 0 or -1 with err set ("peer_auth"). */
int peer_seal_start(struct peer_conn *c, const struct peer_auth *a, const struct peer_link *link,
                    const unsigned char lnonce[WIRE_NONCE_BYTES],
                    const unsigned char dnonce[WIRE_NONCE_BYTES], const char *dialer_role,
                    const char *listener_role, int dialer, struct shoal_err *err);

/* Sealing a frame on encrypted connection c, in this order: its header
 * (job and epoch as f says; the frame numbered, the header's tag in head,
 * WIRE_SEALED_HEADER_BYTES), its payload in pieces (dst may be src), then
 * the payload's tag (none for an empty payload).  Each returns 0, or -1
 * with err set ("peer_io"). */
int peer_seal_header(struct peer_conn *c, struct wire_frame *f, unsigned char *head, struct shoal_err *err);
int peer_seal_piece(struct peer_conn *c, unsigned char *dst, const unsigned char *src, size_t n,
                    struct shoal_err *err);
int peer_seal_tag(struct peer_conn *c, unsigned char tag[WIRE_TAG_BYTES], struct shoal_err *err);
/* All three for a whole frame into buf (payload_len bytes): a stream's slot. */
int peer_seal_frame(struct peer_conn *c, struct wire_frame *f, const void *payload, unsigned char *head,
                    unsigned char *buf, unsigned char tag[WIRE_TAG_BYTES], struct shoal_err *err);

/* Opening a frame the same way: the header (checked, the frame's fields
 * into f; a payload over payload_max refused), the payload decrypted in
 * place in pieces (not to be trusted before its tag), then the tag.  A
 * header or payload that fails authentication is "peer_auth" and the
 * connection reads nothing more (seal->rx_failed); a bad header is
 * "peer_protocol".  Each returns 0, or -1 with err set. */
int peer_open_header(struct peer_conn *c, const unsigned char *head, uint64_t payload_max, struct wire_frame *f,
                     struct shoal_err *err);
int peer_open_piece(struct peer_conn *c, unsigned char *buf, size_t n, struct shoal_err *err);
int peer_open_tag(struct peer_conn *c, const unsigned char tag[WIRE_TAG_BYTES], struct shoal_err *err);

/* Prepares a frame for sending: stamps the connection's job and epoch into
 * *f, computes the payload CRC unless crc_done, encodes the header; on an
 * encrypted connection seals the header instead and the payload as it goes
 * (crc_done is then ignored).  Returns 0 or -1 with err set. */
int peer_tx_init(struct peer_tx *t, struct peer_conn *c, struct wire_frame *f,
                 const void *payload, int crc_done, struct shoal_err *err);

/* Prepares a frame sealed beforehand (peer_seal_frame). */
void peer_tx_init_sealed(struct peer_tx *t, struct peer_conn *c,
                         const unsigned char head[WIRE_SEALED_HEADER_BYTES],
                         const void *ciphertext, uint64_t len,
                         const unsigned char tag[WIRE_TAG_BYTES]);

void peer_rx_init(struct peer_rx *r, struct peer_conn *c, struct wire_frame *f, void *payload,
                  uint64_t payload_max, int check_binding);

/* After a header_only receive: read the payload into `payload` next. */
void peer_rx_payload(struct peer_rx *r, void *payload);

/* Drives t and r (either may be NULL) until both are done, polling both
 * sockets, within io's limits.  Returns 0 or -1 with err set. */
int peer_exchange(struct peer_tx *t, struct peer_rx *r, const struct peer_io *io,
                  struct shoal_err *err);

/* Convenience: one frame out / one frame in with the engine above. */
int peer_send_io(struct peer_conn *c, struct wire_frame *f, const void *payload, int crc_done,
                 const struct peer_io *io, struct shoal_err *err);
int peer_recv_io(struct peer_conn *c, struct wire_frame *f, void *payload, size_t cap,
                 int check_binding, const struct peer_io *io, struct shoal_err *err);

/* Builds and sends a WIRE_ERROR frame carrying `reason`, best effort. */
void peer_send_error(struct peer_conn *c, const char *reason, const struct peer_io *io);

#endif
