/* tls.c - the REST API's certificate and key (see tls.h).  OpenSSL, which
 * the server links for hashing anyway, checks what GnuTLS will serve. */
#include "tls.h"

#include <errno.h>
#include <microhttpd.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../common/log.h"

/* Reads a whole PEM file (at most TLS_PEM_MAX bytes) into a new
 * NUL-terminated string.  Returns it, or NULL with err set. */
static char *tls_read_pem(const char *path, const char *field, const char *what, struct shoal_err *err)
{
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, 2, "invalid_config", field, "cannot open the TLS %s '%s': %s", what, path, strerror(errno));
        goto out;
    }
    text = malloc(TLS_PEM_MAX + 1);
    if (!text) {
        err_set(err, 2, "invalid_config", field, "out of memory reading the TLS %s", what);
        goto out;
    }
    size_t n = fread(text, 1, TLS_PEM_MAX + 1, f);
    if (ferror(f) || n == 0 || n > TLS_PEM_MAX || !strstr(text, "-----BEGIN ") || memchr(text, '\0', n)) {
        err_set(err, 2, "invalid_config", field, "the TLS %s '%s' is %s", what, path,
                ferror(f) ? "unreadable" : n == 0 ? "empty" : n > TLS_PEM_MAX ? "over 1 MiB" : "not a PEM file");
        free(text);
        text = NULL;
        goto out;
    }
    text[n] = '\0';
out:
    if (f)
        fclose(f);
    return text;
}

/* Refuses to ask for a passphrase: the server starts unattended. */
static int tls_no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

/* The certificate parses, is valid now, and `key` is its private key. */
static int tls_check_pair(const struct tls_files *t, const char *cert_path, const char *key_path,
                          struct shoal_err *err)
{
    int rc = -1;
    X509 *cert = NULL;
    EVP_PKEY *key = NULL;
    BIO *cb = BIO_new_mem_buf(t->cert_pem, -1);
    BIO *kb = BIO_new_mem_buf(t->key_pem, -1);
    if (!cb || !kb) {
        err_set(err, 2, "invalid_config", "tls_cert", "out of memory checking the TLS files");
        goto out;
    }
    cert = PEM_read_bio_X509(cb, NULL, tls_no_passphrase, NULL);
    if (!cert) {
        err_set(err, 2, "invalid_config", "tls_cert", "'%s' holds no PEM certificate", cert_path);
        goto out;
    }
    key = PEM_read_bio_PrivateKey(kb, NULL, tls_no_passphrase, NULL);
    if (!key) {
        err_set(err, 2, "invalid_config", "tls_key",
                "'%s' holds no unencrypted PEM private key (a key with a passphrase cannot be used)", key_path);
        goto out;
    }
    if (X509_check_private_key(cert, key) != 1) {
        err_set(err, 2, "invalid_config", "tls_key", "the key in '%s' does not belong to the certificate in '%s'",
                key_path, cert_path);
        goto out;
    }
    if (X509_cmp_current_time(X509_get0_notBefore(cert)) >= 0 ||
        X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
        err_set(err, 2, "invalid_config", "tls_cert", "the certificate in '%s' is expired or not yet valid",
                cert_path);
        goto out;
    }
    rc = 0;
out:
    X509_free(cert);
    EVP_PKEY_free(key);
    BIO_free(cb);
    BIO_free(kb);
    return rc;
}

int tls_load(const char *cert_path, const char *key_path, struct tls_files *out, struct shoal_err *err)
{
    struct stat st;
    memset(out, 0, sizeof *out);
    if (!cert_path[0] && !key_path[0])
        return 0;
    if (!cert_path[0] || !key_path[0])
        return err_set(err, 2, "invalid_config", cert_path[0] ? "tls_key" : "tls_cert",
                       "TLS needs both --tls-cert and --tls-key");
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return err_set(err, 2, "invalid_config", "tls_cert",
                       "this libmicrohttpd was built without TLS; install one with GnuTLS or drop --tls-cert");
    out->cert_pem = tls_read_pem(cert_path, "tls_cert", "certificate", err);
    out->key_pem = out->cert_pem ? tls_read_pem(key_path, "tls_key", "key", err) : NULL;
    if (!out->key_pem || tls_check_pair(out, cert_path, key_path, err) != 0) {
        tls_free(out);
        return -1;
    }
    if (stat(key_path, &st) == 0 && (st.st_mode & 077))
        log_warn("the TLS key %s can be read by other users (mode %03o); chmod 600 it", key_path,
                 (unsigned)(st.st_mode & 0777));
    return 0;
}

void tls_free(struct tls_files *t)
{
    if (t->key_pem) {
        OPENSSL_cleanse(t->key_pem, strlen(t->key_pem));
        free(t->key_pem);
    }
    free(t->cert_pem);
    t->cert_pem = NULL;
    t->key_pem = NULL;
}
