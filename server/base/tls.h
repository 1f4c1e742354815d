/* tls.h - the REST API's optional TLS: a certificate chain and its private
 * key, PEM files named by --tls-cert and --tls-key, read once at start and
 * kept in memory for libmicrohttpd (which speaks TLS through GnuTLS).
 *
 * Checked before the daemon starts, so a mistake is a clear start-up error
 * instead of a daemon that will not listen: both files or neither, readable,
 * PEM, the key matching the certificate, and libmicrohttpd built with TLS.
 * An expired or not-yet-valid certificate is refused too; a key file others
 * may read is allowed with a warning. */
#ifndef SHOAL_TLS_H
#define SHOAL_TLS_H

#include "../../common/err.h"

#define TLS_PEM_MAX (1u << 20)  /* bytes; a chain of a few certificates is ~10 KiB */

struct tls_files {
    char *cert_pem;             /* NUL-terminated; NULL: TLS is off */
    char *key_pem;              /* NUL-terminated; wiped when freed */
};

/* Reads and checks the two files; with both paths "" TLS stays off (*out
 * zeroed, returns 0).  Returns 0, or -1 with `err` set (status 2, field
 * "tls_cert" or "tls_key") and nothing held.  Free with tls_free. */
int tls_load(const char *cert_path, const char *key_path, struct tls_files *out, struct shoal_err *err);

/* Wipes the key and frees both; a zeroed struct is fine. */
void tls_free(struct tls_files *t);

#endif
