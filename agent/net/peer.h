/* peer.h - agent-to-agent TCP: the peer port's listener, the hello
 * handshake, framed sends and receives with deadlines, and streams that send
 * and receive on threads of their own.
 *
 * Every connection begins with the listener's HELLO (job 0, payload a fresh
 * 32-byte nonce).  The dialer's first frame, due within 3 s, then decides
 * what it is.  (A listener whose 32 handshake slots are taken, or 16 of
 * them by the dialer's address, or the 16 that addresses it does not
 * expect share (peer_listener_expect_peers), greets and sends an ERROR
 * frame saying "busy" at once, then closes: a dialer retries, and a
 * prober hears a live node.)  The first frame:
 *   - HELLO (job J, epoch E): a job connection.  Payload (common/wire.h):
 *       mac(32) | dialer nonce(32) | flags(1) | dialer role (1..PEER_ROLE_MAX-1 bytes)
 *     with mac = wire_hello_mac(key of the link between the two roles,
 *     listener nonce, J, E, flags, dialer role) and flags WIRE_HELLO_ENCRYPT when the dialer asks for an
 *     encrypted connection (struct peer_auth's encrypt).
 *     The listener checks it against the job it was told to expect
 *     (peer_listener_expect): the dialer's role must be one of its links,
 *     and the MAC that link's key's.  It answers HELLO (J, E) with
 *       mac(32) | flags(1) | listener role
 *     mac = wire_hello_mac(link key, dialer nonce, J, E, flags, listener role),
 *     flags WIRE_HELLO_ENCRYPT when the connection is encrypted: when the
 *     dialer asked, or the listener's expectation or the listener itself
 *     (peer_listener_set_encryption) wants it.  The dialer checks the MAC,
 *     that the role is the one it meant to reach, and that an encryption it
 *     asked for was granted.  Both flags are under the MACs, so a man in
 *     the middle cannot strip them: a downgrade fails the handshake.
 *     A peer that fails any check is dropped and logged with its address.
 *     Encrypted connections then seal every frame both ways with
 *     AES-256-GCM under per-connection, per-direction keys (wire.h): a frame
 *     that fails its tag fails the connection with "peer_auth"; nothing of
 *     its payload is delivered.  Plain connections carry CRC32C only.
 *   - PING / PROBE (job 0): a link-probe session.  The listener answers each
 *     PING with a PONG carrying the same payload (at most 64 bytes), and each
 *     PROBE frame whose micro_batch is 1 (the last of a burst) with an empty
 *     PONG once the frame is read whole.  A session is bounded: at most
 *     PEER_PROBE_MAX_BYTES of PROBE payload, PEER_PROBE_MAX_S seconds,
 *     PEER_IDLE_S seconds for a frame and 3 s to the next one's header (a
 *     prober sends back to back; an idle session only holds a slot).  Probe sessions are never
 *     encrypted: they carry no data, only filler bytes and timings, and
 *     have no link key to key them with.
 *   - anything else: dropped, logged.
 *
 * Errors: functions return 0 or -1 with a sentence in err->message that
 * names the peer's address and what was wrong (bad CRC, wrong job, timeout,
 * closed, ...); err->code is one of "peer_timeout", "peer_closed",
 * "peer_protocol" (bad frame, CRC, unexpected kind/job/epoch/step/shape),
 * "peer_auth" (handshake failed, or a sealed frame failed its tag: the
 * connection is then dead), "peer_io" (other socket errors).
 * A negative timeout_ms anywhere below means no deadline. */
#ifndef SHOAL_AGENT_PEER_H
#define SHOAL_AGENT_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../../common/relay_ticket.h"
#include "../../common/wire.h"

#define PEER_ROLE_MAX WIRE_ROLE_MAX         /* bytes, with the terminating NUL */
#define PEER_KEY_MAX 64                     /* bytes of a link key */
#define PEER_LINKS_MAX 8                    /* links of a tasklet: 2 stage, 2 ring, 1 tied head */
#define PEER_PROBE_MAX_BYTES (64u << 20)    /* per probe session */
#define PEER_PROBE_MAX_S 30
#define PEER_IDLE_S 10
#define PEER_HANDSHAKE_MS 10000

/* One link of a tasklet: the role at its other end and the link's key
 * (wire_link_key; tests may key a link with any bytes). */
struct peer_link {
    char role[PEER_ROLE_MAX];
    unsigned char key[PEER_KEY_MAX];
    size_t key_len;                         /* bytes; 1..PEER_KEY_MAX */
};

/* What a job connection proves and is bound to: a connection is made only
 * on one of `links`, keyed with that link's key. */
struct peer_auth {
    struct peer_link links[PEER_LINKS_MAX];
    int n_links;
    int64_t job_id;
    uint32_t epoch;
    char role[PEER_ROLE_MAX];               /* ours, e.g. "stage=1 replica=0" */
    int encrypt;                            /* 1: ask for an encrypted connection */
};

struct peer_seal; /* an encrypted connection's keys and frame counters */

/* One connected, authenticated (or probe) socket.  Blocking I/O with
 * deadlines through poll(); not thread-safe except that one thread may send
 * while another receives.  A peer_conn owns its socket and seal: copy it
 * only to move it (then forget the source). */
struct peer_conn {
    int fd;                                 /* -1 when closed */
    char addr[64];                          /* remote host:port, for messages */
    char role[PEER_ROLE_MAX];               /* the remote's proven role; "" for probes */
    unsigned channel;                       /* enum wire_channel, as the dialer's hello named it */
    int64_t job_id;
    uint32_t epoch;
    uint64_t bytes_sent, bytes_received;    /* payload, headers and tags */
    struct peer_seal *seal;                 /* NULL: plain; else encrypted (owned) */
};

/* Adds the link to the tasklet of `role` with its key (a second add of a
 * role replaces the first).  Returns 0, or -1 when the role or key is
 * malformed or PEER_LINKS_MAX links are there. */
int peer_auth_link(struct peer_auth *a, const char *role, const void *key, size_t key_len);

/* The link of auth to `role`, or NULL when it has none. */
const struct peer_link *peer_auth_find(const struct peer_auth *a, const char *role);

/* Resolves "host:port" and connects within timeout_ms, with TCP_NODELAY
 * (socket buffers grow by the kernel's autotuning).  Then, if auth is non-NULL, runs the dialer's side
 * of the handshake on auth's link to want_role (which must be one of its
 * links) and checks the listener proves that role; with auth NULL it only
 * reads the listener's HELLO (a probe session follows).
 * On success fills *out (caller closes it with peer_close). */
int peer_dial(const char *addr, const struct peer_auth *auth, const char *want_role,
              int timeout_ms, struct peer_conn *out, struct shoal_err *err);

/* peer_dial of the connection on `channel` (enum wire_channel) of the link
 * to want_role; peer_dial dials WIRE_CHANNEL_STAGE. */
int peer_dial_channel(const char *addr, const struct peer_auth *auth, const char *want_role, unsigned channel,
                      int timeout_ms, struct peer_conn *out, struct shoal_err *err);

/* The dialer's side on a socket `fd` already connected (to a relay that
 * paired it with the other end, relay_dial.h): the listener's greeting, then
 * the hello as peer_dial_channel.  Takes fd (closed on failure); `addr`
 * names the far end in messages. */
int peer_dial_fd(int fd, const char *addr, const struct peer_auth *auth, const char *want_role, unsigned channel,
                 int timeout_ms, struct peer_conn *out, struct shoal_err *err);

/* Connects to shoal-relay `relay` ("host:port") within timeout_ms and
 * sends the request for the end `ticket` admits (the server's ticket: its
 * side is the request's; token: wire_relay_token, zeros for a probe;
 * common/relay_proto.h).  Returns the socket, the relay's answer not yet
 * read, or -1 with err set. */
int peer_relay_open(const char *relay, const struct relay_ticket *ticket, const unsigned char token[WIRE_MAC_BYTES],
                    int timeout_ms, struct shoal_err *err);

/* peer_dial_channel through shoal-relay `relay`, for a link neither end
 * can connect to the other on: opens the dialer's side there with the
 * server's `ticket` for it (a dialer's, on `channel`: else 500
 * "bad_assignment"), waits for the other end (within timeout_ms), then the
 * hello, end to end, always asking for a sealed connection (the relay
 * reads and alters nothing unnoticed). */
int peer_dial_relayed(const char *relay, const struct relay_ticket *ticket, const struct peer_auth *auth,
                      const char *want_role, unsigned channel, int timeout_ms, struct peer_conn *out,
                      struct shoal_err *err);

/* Closes the socket and frees the seal; the struct may be reused. */
void peer_close(struct peer_conn *c);

/* Sends one frame: f's header (payload_len set by the caller, payload_crc
 * and flags computed here, job_id and epoch set here to the connection's)
 * then the payload, within timeout_ms.  Encrypted connections seal the
 * payload piece by piece into a buffer of the connection's as it goes out
 * (the caller's payload is left as it is). */
int peer_send(struct peer_conn *c, struct wire_frame *f, const void *payload, int timeout_ms,
              struct shoal_err *err);

/* Receives one frame within timeout_ms: checks the header (payload at most
 * payload_cap bytes), reads the payload into `payload` and checks its CRC,
 * or on an encrypted connection its tags (decrypting in place).  The
 * frame's job and epoch must be the connection's (probe sessions: 0).  On
 * error the contents of `payload` are unspecified. */
int peer_recv(struct peer_conn *c, struct wire_frame *f, void *payload, size_t payload_cap,
              int timeout_ms, struct shoal_err *err);

/* Sends on `to` and receives from `from` at the same time (poll on both
 * sockets), so two ranks sending to each other never deadlock whatever the
 * sizes.  Either may be the same connection.  Same checks as peer_recv.
 * sf NULL: receive only; rf NULL: send only. */
int peer_sendrecv(struct peer_conn *to, struct wire_frame *sf, const void *spayload,
                  struct peer_conn *from, struct wire_frame *rf, void *rpayload, size_t rcap,
                  int timeout_ms, struct shoal_err *err);

/* A reason to stop waiting: stop(arg) non-zero (a tasklet whose job was
 * re-planned).  A wait with one checks it every PEER_STOP_SLICE_MS. */
#define PEER_STOP_SLICE_MS 250
struct peer_stop {
    int (*stop)(void *arg);
    void *arg;
};

/* peer_sendrecv that gives up within PEER_STOP_SLICE_MS of `stop` saying
 * so (-1, code "peer_io"); stop NULL: peer_sendrecv. */
int peer_sendrecv_stop(struct peer_conn *to, struct wire_frame *sf, const void *spayload,
                       struct peer_conn *from, struct wire_frame *rf, void *rpayload, size_t rcap,
                       int timeout_ms, const struct peer_stop *stop, struct shoal_err *err);

/* The peer port.  An accept thread hands each new socket to a short-lived
 * handshake thread (at most 32 at once; more are closed), which answers
 * probe sessions itself and parks authenticated job connections until
 * peer_listener_take claims them. */
struct peer_listener;

/* Binds "host:port" (port 0: any), listens and starts the accept thread.
 * *bound_port gets the port.  Free with peer_listener_stop. */
int peer_listener_start(const char *bind_addr, struct peer_listener **out, unsigned *bound_port,
                        struct shoal_err *err);

/* Stops accepting, closes parked connections, joins every thread. */
void peer_listener_stop(struct peer_listener *l);

/* From now on accept job connections for auth->job_id and auth->epoch only,
 * from the roles of auth's links, proving auth->role; connections of an earlier expectation still parked
 * are closed.  auth NULL: accept no job connections (probe sessions still). */
void peer_listener_expect(struct peer_listener *l, const struct peer_auth *auth);

/* The hosts of `addrs` ("host:port" or "[v6]:port", n of them; "" passed
 * over) are the current assignment's peers: from now on connections from
 * them may take any free handshake slot, while addresses the listener does
 * not expect share 16 of the 32, so strangers cannot keep a tasklet's
 * neighbours out.  Call it when an assignment starts, with every
 * neighbour's peer address (stage, ring and tied links), and with n 0 when
 * it ends.  Names are resolved here (every address a name has counts).
 * The list replaces the last one.  Returns 0, or -1 with err naming the
 * first address that is malformed or does not resolve (the rest are
 * expected all the same). */
int peer_listener_expect_peers(struct peer_listener *l, const char *const *addrs, int n, struct shoal_err *err);

/* The host of the server's URL `url` (every address it resolves to) is
 * expected too, whatever the assignment: the server probes the peer port
 * (server/jobs/peer_probe.c).  Returns 0, or -1 with err set when the URL
 * names no host or it does not resolve (then the server counts as a
 * stranger). */
int peer_listener_expect_server(struct peer_listener *l, const char *url, struct shoal_err *err);

/* The listener's side of a relayed connection from `dialer_role` on
 * `channel`, for the current expectation: opens it at shoal-relay `relay`
 * (within timeout_ms) with the server's `ticket` for it (a listener's, on
 * `channel`: else 500 "bad_assignment") and returns; a handshake thread
 * waits up to wait_ms for the relay to pair it, then greets, checks the
 * hello as for an accepted connection and parks it for
 * peer_listener_take_stop.  Returns 0 once the request is at the relay,
 * else -1 with err set. */
int peer_listener_relay(struct peer_listener *l, const char *relay, const struct relay_ticket *ticket,
                        const char *dialer_role, unsigned channel, int timeout_ms, int wait_ms, struct shoal_err *err);

/* Waits up to timeout_ms for a parked job connection from the peer whose
 * proven role is `role`, on channel WIRE_CHANNEL_STAGE, and moves it into
 * *out. */
int peer_listener_take(struct peer_listener *l, const char *role, int timeout_ms,
                       struct peer_conn *out, struct shoal_err *err);

/* peer_listener_take of the connection on `channel` (enum wire_channel)
 * that gives up within PEER_STOP_SLICE_MS of `stop` saying so (-1, code
 * "peer_io"); stop NULL: no stop. */
int peer_listener_take_stop(struct peer_listener *l, const char *role, unsigned channel, int timeout_ms,
                            const struct peer_stop *stop, struct peer_conn *out, struct shoal_err *err);

/* on 1: every job connection this listener accepts is encrypted, whatever
 * the dialer asks (the agent's --peer-encryption).  Default 0. */
void peer_listener_set_encryption(struct peer_listener *l, int on);

/* What peer_listener_set_encryption set; the agent's dialers ask for the
 * same. */
int peer_listener_encryption(struct peer_listener *l);

/* Probe sessions and job connections refused since start (for logs/tests). */
void peer_listener_counts(struct peer_listener *l, uint64_t *probe_sessions, uint64_t *refused);

/* A job connection driven by two threads: one sends queued frames in order,
 * one receives frames into a bounded queue.  The owner's thread computes
 * while the network works.  A failure on either thread is kept and returned
 * by the next peer_stream_send or peer_stream_recv. */
struct peer_stream;

/* Takes ownership of *c (left with fd -1).  payload_cap bounds every received
 * payload; queue_frames bounds each queue (sends block when it is full). */
int peer_stream_start(struct peer_conn *c, size_t payload_cap, int queue_frames,
                      struct peer_stream **out, struct shoal_err *err);

/* Queues a frame; the payload (f->payload_len bytes) is copied (and its
 * CRC computed in the same pass; on an encrypted connection it is sealed
 * instead, the encryption doing the copy); job and epoch are the
 * connection's.  Fails if the stream has failed or the queue stays full for
 * timeout_ms. */
int peer_stream_send(struct peer_stream *s, const struct wire_frame *f, const void *payload,
                     int timeout_ms, struct shoal_err *err);

/* Waits up to timeout_ms for the next received frame and checks it is
 * `kind` of `dtype` for `step` and `micro_batch` with exactly payload_len
 * bytes (what the job's assignment makes of them: a frame of another wire
 * type or length is refused, whatever its header says); copies
 * the payload into `payload`.  Any other frame is a "peer_protocol" error
 * (a WIRE_ERROR frame's text is quoted in the message) and fails the
 * stream.  Frames received before a failure are still delivered; the
 * failure comes once the queue is empty.  On error the contents of
 * `payload` are unspecified (a frame may have been arriving straight into
 * it; after a timeout it is kept and delivered by the next call). */
int peer_stream_recv(struct peer_stream *s, uint16_t kind, uint16_t dtype, uint64_t step,
                     uint32_t micro_batch, void *payload, size_t payload_len, int timeout_ms,
                     struct shoal_err *err);

/* Waits up to timeout_ms until every queued frame has been written. */
int peer_stream_flush(struct peer_stream *s, int timeout_ms, struct shoal_err *err);

/* Seconds the owner spent blocked in peer_stream_send and peer_stream_recv
 * since the last call, and resets them. */
void peer_stream_take_waits(struct peer_stream *s, double *send_wait_s, double *recv_wait_s);

/* Bytes of every frame queued so far (headers, payloads, and on an
 * encrypted connection the tags): what goes on the wire, counted as the
 * agent reports it per step. */
uint64_t peer_stream_queued_bytes(struct peer_stream *s);

const char *peer_stream_addr(const struct peer_stream *s);

/* 1 when the stream's connection is encrypted. */
int peer_stream_encrypted(const struct peer_stream *s);

/* Stops both threads, closes the socket, frees everything. NULL is ignored. */
void peer_stream_stop(struct peer_stream *s);

#endif
