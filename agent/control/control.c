/* control.c - the control-plane client (see control.h). */
#include "control.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "../../common/buf.h"
#include "../../common/log.h"
#include "../../common/sha256.h"
#include "../../common/clock.h"

#define BACKOFF_FIRST_S 0.25
#define BACKOFF_MAX_S 15.0
#define WARN_EVERY_S 30.0  /* a failing call's warning, at least this often */

double ctl_now(void)
{
    return mono_s();
}

int ctl_token_load(const char *token, const char *file, const char *missing_hint, char out[TOKEN_MAX],
                   struct shoal_err *err)
{
    if (token[0]) {
        if (strlen(token) >= TOKEN_MAX || !token_well_formed(token))
            return err_set(err, 400, "bad_token", NULL, "the token given is not a well-formed token");
        snprintf(out, TOKEN_MAX, "%s", token);
        return 0;
    }
    FILE *f = file[0] ? fopen(file, "r") : NULL;
    if (!f)
        return err_set(err, 401, "no_token", NULL, "%s%s%s", missing_hint, file[0] ? "; cannot open " : "", file);
    int ok = fgets(out, TOKEN_MAX, f) != NULL;
    fclose(f);
    out[strcspn(out, "\r\n")] = '\0';
    if (!ok || !token_well_formed(out))
        return err_set(err, 400, "bad_token", NULL, "%s does not hold a token", file);
    return 0;
}

struct timespec ctl_abstime(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)((seconds - (double)(time_t)seconds) * 1e9);
    ts.tv_sec += (time_t)seconds + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    return ts;
}

void ctl_sleep(const struct ctl *c, double s)
{
    double until = ctl_now() + s;
    while (!(c->stop && atomic_load(c->stop))) {
        double left = until - ctl_now();
        if (left <= 0)
            break;
        if (left > 0.1)
            left = 0.1;
        struct timespec ts = { (time_t)left, (long)((left - (double)(time_t)left) * 1e9) };
        nanosleep(&ts, NULL);
    }
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    return buf_append(arg, data, size * n) == 0 ? size * n : 0;
}

/* Fills err from an error answer {"error": {"code", "message", "field"}}. */
static void err_from_answer(long status, const json_t *body, struct shoal_err *err)
{
    const json_t *e = json_object_get(body, "error");
    const char *code = json_string_value(json_object_get(e, "code"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    const char *field = json_string_value(json_object_get(e, "field"));
    err_set(err, (int)status, code ? code : "http_error", field, "%s (HTTP %ld)",
            msg ? msg : "the server answered with an error", status);
}

/* One request.  Either `body` (JSON) or `upload` (a file) or neither;
 * `download` receives the body instead of the buffer when set, and
 * `sha_header` gets the X-Shoal-SHA256 answer header. */
struct call {
    const char *method, *path;
    json_t *body;
    FILE *upload;
    curl_off_t upload_bytes;
    const char *sha256_hex;
    FILE *download;
    char sha_header[65];
    long retry_after_s;         /* a 429's Retry-After, seconds; 0 if none */
};

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct call *k = arg;
    size_t len = size * n;
    static const char name[] = "x-shoal-sha256:";
    static const char retry[] = "retry-after:";
    if (len > sizeof retry - 1 && strncasecmp(data, retry, sizeof retry - 1) == 0) {
        char v[32];
        size_t vl = len - (sizeof retry - 1) < sizeof v - 1 ? len - (sizeof retry - 1) : sizeof v - 1;
        memcpy(v, data + sizeof retry - 1, vl);
        v[vl] = '\0';
        char *end;
        long s = strtol(v, &end, 10);
        k->retry_after_s = end != v && s > 0 && s <= 86400 ? s : 0;
    }
    if (len > sizeof name - 1 && strncasecmp(data, name, sizeof name - 1) == 0) {
        const char *v = data + sizeof name - 1;
        size_t vl = len - (sizeof name - 1);
        while (vl && (*v == ' ' || *v == '\t'))
            v++, vl--;
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        if (vl == 64) {
            memcpy(k->sha_header, v, 64);
            k->sha_header[64] = '\0';
        }
    }
    return len;
}

/* Aborts a transfer (a long-poll, an upload) once the agent is stopping. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    const struct ctl *c = arg;
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return c->stop && atomic_load(c->stop);
}

static int perform(const struct ctl *c, struct call *k, long timeout_s, long *status, json_t **out,
                   struct shoal_err *err)
{
    char url[1024], auth[TOKEN_MAX + 32], sha[96];
    struct curl_slist *hdr = NULL;
    struct buf resp;
    char *text = NULL;
    int rc = -1;
    buf_init(&resp, CTL_BODY_MAX);
    if (out)
        *out = NULL;
    *status = 0;
    CURL *h = curl_easy_init();
    if (!h) {
        err_set(err, 500, "internal", NULL, "cannot start an HTTP client");
        goto out;
    }
    snprintf(url, sizeof url, "%s%s", c->url, k->path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->token);
    hdr = curl_slist_append(hdr, auth);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, k->method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, (void *)c);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, k);
    if (c->ca_file[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (k->download) {
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fwrite);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, k->download);
    } else {
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
    }
    if (k->body) {
        text = json_dumps(k->body, JSON_COMPACT | JSON_REAL_PRECISION(17));
        if (!text) {
            err_set(err, 500, "internal", NULL, "cannot encode a request body");
            goto out;
        }
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    } else if (k->upload) {
        hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
        snprintf(sha, sizeof sha, "X-Shoal-SHA256: %s", k->sha256_hex);
        hdr = curl_slist_append(hdr, sha);
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READDATA, k->upload);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, k->upload_bytes);
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        int tls = cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE;
        int absent = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_OPERATION_TIMEDOUT;
        err_set(err, 503, "server_unreachable", NULL, "cannot reach the server at %s: %s%s", c->url,
                curl_easy_strerror(cc),
                tls ? " (give the CA that signed the server's certificate with --ca-file)"
                : absent ? " (is shoal-server running there? it listens on 127.0.0.1 only unless started with "
                           "--listen 0.0.0.0; check --server)" : "");
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    json_t *j = resp.len ? json_loadb(resp.data, resp.len, 0, NULL) : NULL;
    if (*status >= 400)
        err_from_answer(*status, j, err);
    if (out)
        *out = j;
    else
        json_decref(j);
    rc = 0;
out:
    free(text);
    buf_free(&resp);
    curl_slist_free_all(hdr);
    if (h)
        curl_easy_cleanup(h);
    return rc;
}

int ctl_call(const struct ctl *c, const char *method, const char *path, json_t *body,
             long timeout_s, long *status, json_t **out, struct shoal_err *err)
{
    struct call k = { .method = method, .path = path, .body = body };
    return perform(c, &k, timeout_s, status, out, err);
}

/* Seconds to wait before retry number `attempt` (0-based): doubling from
 * BACKOFF_FIRST_S up to BACKOFF_MAX_S, each with +-50% jitter so a fleet
 * that lost its server does not come back in lock-step. */
static double backoff_s(int attempt)
{
    double d = BACKOFF_FIRST_S * pow(2.0, attempt > 10 ? 10 : attempt);
    if (d > BACKOFF_MAX_S)
        d = BACKOFF_MAX_S;
    unsigned r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (unsigned)(ctl_now() * 1e6);
    return d * (0.5 + (double)(r % 1000) / 1000.0);
}

/* Retries `k` per ctl_call_retry's contract; rewinds uploads and downloads. */
static int perform_retry(const struct ctl *c, struct call *k, long timeout_s, double deadline_s,
                         json_t **out, struct shoal_err *err)
{
    double until = ctl_now() + deadline_s, warned = 0;
    for (int attempt = 0;; attempt++) {
        long status;
        json_t *j = NULL;
        if (k->upload)
            rewind(k->upload);
        if (k->download && (fflush(k->download) != 0 || ftruncate(fileno(k->download), 0) != 0 ||
                            fseek(k->download, 0, SEEK_SET) != 0))
            return err_set(err, 500, "io_error", NULL, "cannot rewind a download: %s", strerror(errno));
        k->retry_after_s = 0;
        int rc = perform(c, k, timeout_s, &status, &j, err);
        /* 429: this address is refused for a while (a blocked NAT shared
         * with someone failing tokens): wait it out like an outage. */
        if (rc == 0 && status < 500 && status != 429) {
            if (out)
                *out = j;
            else
                json_decref(j);
            return status < 300 ? 0 : -1;
        }
        json_decref(j);
        double wait = backoff_s(attempt);
        if (status == 429 && (double)k->retry_after_s > wait)
            wait = (double)k->retry_after_s;
        if ((c->stop && atomic_load(c->stop)) || (deadline_s > 0 && ctl_now() + wait > until))
            return -1;
        /* An operator sees the first three failures, then one at least
         * every WARN_EVERY_S: a wrong URL or CA shows at once and keeps
         * showing, an outage does not flood the log. */
        if (attempt < 3 || ctl_now() - warned >= WARN_EVERY_S) {
            warned = ctl_now();
            log_warn("control %s %s failed (attempt %d), retrying in %.1f s: %s", k->method, k->path,
                     attempt + 1, wait, err->message);
        } else {
            log_debug("control retry path=%s attempt=%d wait_s=%.2f reason=\"%s\"", k->path, attempt + 1,
                      wait, err->message);
        }
        ctl_sleep(c, wait);
    }
}

int ctl_call_retry(const struct ctl *c, const char *method, const char *path, json_t *body,
                   long timeout_s, double deadline_s, json_t **out, struct shoal_err *err)
{
    struct call k = { .method = method, .path = path, .body = body };
    return perform_retry(c, &k, timeout_s, deadline_s, out, err);
}

int ctl_put_file(const struct ctl *c, const char *path, const char *file, const char *sha256_hex,
                 double deadline_s, json_t **out, struct shoal_err *err)
{
    struct call k = { .method = "PUT", .path = path, .sha256_hex = sha256_hex };
    int rc = -1;
    k.upload = fopen(file, "rb");
    if (!k.upload) {
        err_set(err, 500, "io_error", NULL, "cannot open %s: %s", file, strerror(errno));
        goto out;
    }
    if (fseeko(k.upload, 0, SEEK_END) != 0 || (k.upload_bytes = ftello(k.upload)) < 0) {
        err_set(err, 500, "io_error", NULL, "cannot size %s: %s", file, strerror(errno));
        goto out;
    }
    rc = perform_retry(c, &k, 600, deadline_s, out, err);
out:
    if (k.upload)
        fclose(k.upload);
    return rc;
}

int ctl_get_file(const struct ctl *c, const char *path, const char *file, double deadline_s,
                 struct shoal_err *err)
{
    struct call k = { .method = "GET", .path = path };
    char got[65];
    int rc = -1;
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !(k.download = fdopen(fd, "wb"))) {
        err_set(err, 500, "io_error", NULL, "cannot create %s: %s", file, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    if (perform_retry(c, &k, 600, deadline_s, NULL, err) != 0)
        goto out;
    if (fflush(k.download) != 0) {
        err_set(err, 500, "io_error", NULL, "cannot write %s: %s", file, strerror(errno));
        goto out;
    }
    if (!k.sha_header[0]) {
        err_set(err, 502, "checksum_missing", NULL, "the server sent %s without an X-Shoal-SHA256 header", path);
        goto out;
    }
    if (sha256_file_hex(file, got, err) != 0)
        goto out;
    if (strcmp(got, k.sha_header) != 0) {
        err_set(err, 422, "checksum_mismatch", NULL, "%s: SHA-256 %s does not match the server's %s", path, got,
                k.sha_header);
        goto out;
    }
    rc = 0;
out:
    if (k.download)
        fclose(k.download);
    if (rc != 0)
        unlink(file);
    return rc;
}
