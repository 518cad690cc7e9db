/*
 * s3:// for the remote transport: the endpoint URL of s3://BUCKET/KEY, the
 * region and credentials (the AWS environment variables, then the profile in
 * ~/.aws/credentials and ~/.aws/config, as the aws tool reads them), and
 * multipart uploads. Signing itself is libcurl's CURLOPT_AWS_SIGV4 (remote.c).
 * Leaves out: instance metadata, SSO, credential_process and assume-role
 * profiles; parallel part uploads.
 */
#include "data/shard/remote_int.h"

#include "io/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define S3_MAX_PARTS 10000
#define S3_MiB (1LL << 20)

/* ---------------------------------------------------------------- text helpers */

static bool s3_unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '~';
}

/* URI-encode s as SigV4 wants it (every byte but A-Za-z0-9-_.~, and '/' when
 * keep_slash), appending to out (cap bytes). false when it does not fit. */
static bool s3_encode(char *out, size_t cap, const char *s, bool keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = strlen(out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (s3_unreserved(*p) || (keep_slash && *p == '/')) {
            if (o + 2 > cap) return false;
            out[o++] = (char)*p;
        } else {
            if (o + 4 > cap) return false;
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = '\0';
    return true;
}

bool remote_xml_text(const char *xml, const char *tag, char *out, size_t cap) {
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = xml ? strstr(xml, open) : NULL;
    if (!a) return false;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b) return false;
    static const struct { const char *ent; char c; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t o = 0;
    while (a < b && o + 1 < cap) {
        char c = *a++;
        if (c == '&') {
            for (size_t i = 0; i < sizeof ents / sizeof ents[0]; i++) {
                size_t n = strlen(ents[i].ent);
                if ((size_t)(b - (a - 1)) >= n && strncmp(a - 1, ents[i].ent, n) == 0) {
                    c = ents[i].c;
                    a += n - 1;
                    break;
                }
            }
        }
        out[o++] = c;
    }
    out[o] = '\0';
    return true;
}

/* Append s XML-escaped. */
static bool s3_xml_escape(char *out, size_t cap, size_t *o, const char *s) {
    for (; *s; s++) {
        const char *rep = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : NULL;
        size_t n = rep ? strlen(rep) : 1;
        if (*o + n + 1 > cap) return false;
        if (rep) memcpy(out + *o, rep, n);
        else out[*o] = *s;
        *o += n;
    }
    out[*o] = '\0';
    return true;
}

static char *s3_trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

/* key's value in [section] of an INI text (the aws files). Works on a copy of
 * each line; out gets "" when absent. Returns 1 found, 0 absent, -1 too long. */
static int s3_ini_get(const char *text, const char *section, const char *key, char *out, size_t cap) {
    out[0] = '\0';
    if (!text) return 0;
    bool in = false;
    int found = 0;
    char line[8192];
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
        memcpy(line, p, k);
        line[k] = '\0';
        p += n + (p[n] == '\n');
        char *s = s3_trim(line);
        if (!*s || *s == '#' || *s == ';') continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (!e) continue;
            *e = '\0';
            in = strcmp(s3_trim(s + 1), section) == 0;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq) continue;
        *eq = '\0';
        if (strcasecmp(s3_trim(s), key) != 0) continue;
        char *v = s3_trim(eq + 1);
        if (strlen(v) >= cap) found = -1;
        else snprintf(out, cap, "%s", v), found = 1;
    }
    remote_wipe(line, sizeof line);
    return found;
}

/* A path from env var `var` (a leading ~/ is $HOME), else $HOME/.aws/<name>. */
static void s3_aws_file(char *out, size_t cap, const char *var, const char *name) {
    const char *v = getenv(var);
    const char *home = getenv("HOME");
    if (!home || !*home) home = ".";
    if (v && *v) {
        if (v[0] == '~' && v[1] == '/') snprintf(out, cap, "%s%s", home, v + 1);
        else snprintf(out, cap, "%s", v);
    } else {
        snprintf(out, cap, "%s/.aws/%s", home, name);
    }
}

/* The whole file, or NULL when absent or unreadable (*state says which). The
 * text may hold secrets: release with s3_file_free. */
static char *s3_file_read(const char *path, const char **state, size_t *len) {
    *len = 0;
    if (access(path, F_OK) != 0) {
        *state = "not found";
        return NULL;
    }
    char *text = NULL;
    if (access(path, R_OK) != 0 || ct_file_read_all(path, &text, len) != CT_OK) {
        ct_error_clear();
        *state = "unreadable";
        return NULL;
    }
    *state = "read";
    return text;
}

static void s3_file_free(char *text, size_t len) {
    remote_wipe(text, len);
    free(text);
}

/* ---------------------------------------------------------------- region, credentials */

static ct_status s3_too_long(const remote_target *t, const char *what, const char *where) {
    return CT_ERR(CT_ERR_ARG, "%s: %s in %s is too long", t->disp, what, where);
}

static ct_status s3_credentials(remote_target *t, const char *profile, const char *cred_path,
                                const char *conf, const char *conf_state) {
    remote_s3 *c = &t->cred;
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *sec = getenv("AWS_SECRET_ACCESS_KEY");
    bool has_id = id && *id, has_sec = sec && *sec;
    if (has_id && has_sec) {
        const char *tok = getenv("AWS_SESSION_TOKEN");
        if (!tok || !*tok) tok = getenv("AWS_SECURITY_TOKEN");
        if (strlen(id) >= sizeof c->key_id || strlen(sec) >= sizeof c->secret ||
            (tok && strlen(tok) >= sizeof c->token))
            return s3_too_long(t, "a key", "the environment (AWS_ACCESS_KEY_ID, ...)");
        snprintf(c->key_id, sizeof c->key_id, "%s", id);
        snprintf(c->secret, sizeof c->secret, "%s", sec);
        snprintf(c->token, sizeof c->token, "%s", tok ? tok : "");
        snprintf(c->source, sizeof c->source, "the environment: AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY%s", c->token[0] ? ", AWS_SESSION_TOKEN" : "");
        return CT_OK;
    }
    if (has_id != has_sec) {
        ct_status st = CT_ERR(CT_ERR_ARG, "%s: %s is set but %s is not", t->disp,
                              has_id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                              has_id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
        ct_error_hint("set both, or neither to use a profile of ~/.aws/credentials");
        return st;
    }
    const char *cred_state;
    size_t cred_len;
    char *cred = s3_file_read(cred_path, &cred_state, &cred_len);
    char conf_section[300];
    snprintf(conf_section, sizeof conf_section, strcmp(profile, "default") == 0 ? "%s" : "profile %s",
             profile);
    struct { const char *text, *section, *path; } srcs[2] = {
        {cred, profile, cred_path}, {conf, conf_section, NULL}};
    ct_status st = CT_OK;
    bool found = false;
    for (int i = 0; i < 2 && !found && st == CT_OK; i++) {
        int a = s3_ini_get(srcs[i].text, srcs[i].section, "aws_access_key_id", c->key_id, sizeof c->key_id);
        int b = s3_ini_get(srcs[i].text, srcs[i].section, "aws_secret_access_key", c->secret,
                           sizeof c->secret);
        int k = s3_ini_get(srcs[i].text, srcs[i].section, "aws_session_token", c->token, sizeof c->token);
        const char *where = i == 0 ? "the credentials file" : "the config file";
        if (a < 0 || b < 0 || k < 0) st = s3_too_long(t, "a key of the profile", where);
        else if (a && b) {
            found = true;
            snprintf(c->source, sizeof c->source, "profile \"%.200s\" of %.360s", profile,
                     i == 0 ? cred_path : "the AWS config file");
        } else if (a || b) {
            st = CT_ERR(CT_ERR_ARG, "%s: profile \"%s\" of %s has %s but not %s", t->disp, profile,
                        where, a ? "aws_access_key_id" : "aws_secret_access_key",
                        a ? "aws_secret_access_key" : "aws_access_key_id");
        }
    }
    s3_file_free(cred, cred_len);
    if (st || found) return st;
    remote_wipe(c, sizeof *c);
    st = CT_ERR(CT_ERR_IO, "%s: no AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                "are not set, and profile \"%s\" (AWS_PROFILE) has no keys in %s (%s) or the "
                "config file (%s)", t->disp, profile, cred_path, cred_state, conf_state);
    ct_error_hint("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE to a profile of "
                  "~/.aws/credentials (AWS_SHARED_CREDENTIALS_FILE names another file)");
    return st;
}

ct_status remote_s3_resolve(remote_target *t, const char *spec) {
    const char *p = spec + 5; /* after s3:// */
    size_t blen = strcspn(p, "/");
    const char *key = p[blen] == '/' ? p + blen + 1 : "";
    if (blen == 0 || !*key)
        return CT_ERR(CT_ERR_ARG, "%s: not an S3 object URL (s3://BUCKET/KEY)", t->disp);
    if (blen > 63)
        return CT_ERR(CT_ERR_ARG, "%s: a bucket name has at most 63 characters", t->disp);
    char bucket[64];
    memcpy(bucket, p, blen);
    bucket[blen] = '\0';
    for (size_t i = 0; i < blen; i++)
        if (!s3_unreserved((unsigned char)bucket[i]) || bucket[i] == '~')
            return CT_ERR(CT_ERR_ARG, "%s: bucket name \"%s\" has a character S3 does not allow",
                          t->disp, bucket);

    /* profile and the config file (region, and keys kept there) */
    const char *profile = getenv("AWS_PROFILE");
    if (!profile || !*profile) profile = getenv("AWS_DEFAULT_PROFILE");
    if (!profile || !*profile) profile = "default";
    char conf_path[1024], cred_path[1024];
    s3_aws_file(conf_path, sizeof conf_path, "AWS_CONFIG_FILE", "config");
    s3_aws_file(cred_path, sizeof cred_path, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
    const char *conf_state;
    size_t conf_len;
    char *conf = s3_file_read(conf_path, &conf_state, &conf_len);
    char conf_section[300];
    snprintf(conf_section, sizeof conf_section, strcmp(profile, "default") == 0 ? "%s" : "profile %s",
             profile);

    ct_status st = CT_OK;
    remote_s3 *c = &t->cred;
    const char *region = getenv("AWS_REGION");
    if (!region || !*region) region = getenv("AWS_DEFAULT_REGION");
    if (region && *region) snprintf(c->region, sizeof c->region, "%s", region);
    else if (s3_ini_get(conf, conf_section, "region", c->region, sizeof c->region) != 1)
        snprintf(c->region, sizeof c->region, "us-east-1");
    for (const char *q = c->region; *q; q++)
        if (!s3_unreserved((unsigned char)*q)) {
            st = CT_ERR(CT_ERR_ARG, "%s: AWS region \"%s\" is not a region name", t->disp, c->region);
            goto done;
        }

    st = s3_credentials(t, profile, cred_path, conf, conf_state);
    if (st) goto done;

    const char *ep = getenv("AWS_ENDPOINT_URL_S3");
    const char *ep_var = "AWS_ENDPOINT_URL_S3";
    if (!ep || !*ep) ep = getenv("AWS_ENDPOINT_URL"), ep_var = "AWS_ENDPOINT_URL";
    size_t cap = strlen(key) * 3 + (ep ? strlen(ep) : 0) + blen + sizeof c->region + 64;
    t->url = malloc(cap);
    if (!t->url) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", t->disp);
        goto done;
    }
    if (ep && *ep) {
        if (strncasecmp(ep, "http://", 7) != 0 && strncasecmp(ep, "https://", 8) != 0) {
            st = CT_ERR(CT_ERR_ARG, "%s: %s is not an http:// or https:// URL", t->disp, ep_var);
            goto done;
        }
        size_t n = strlen(ep);
        while (n > 0 && ep[n - 1] == '/') n--;
        snprintf(t->url, cap, "%.*s/%s/", (int)n, ep, bucket); /* path style */
    } else if (strchr(bucket, '.')) { /* a dotted name breaks the TLS wildcard: path style */
        snprintf(t->url, cap, "https://s3.%s.amazonaws.com/%s/", c->region, bucket);
    } else {
        snprintf(t->url, cap, "https://%s.s3.%s.amazonaws.com/", bucket, c->region);
    }
    s3_encode(t->url, cap, key, true);
done:
    s3_file_free(conf, conf_len);
    if (st) remote_wipe(c, sizeof *c);
    return st;
}

/* ---------------------------------------------------------------- multipart upload */

ct_status remote_s3_put_multipart(remote_target *t, int fd, int64_t size, int64_t part,
                                  const ct_remote_opts *o) {
    if ((size + part - 1) / part > S3_MAX_PARTS) /* raise the part size, in whole MiB */
        part = ((size + S3_MAX_PARTS - 1) / S3_MAX_PARTS + S3_MiB - 1) / S3_MiB * S3_MiB;
    int64_t nparts = (size + part - 1) / part;
    char base_disp[REMOTE_DISP_MAX];
    snprintf(base_disp, sizeof base_disp, "%s", t->disp);
    char (*etags)[256] = calloc((size_t)nparts, sizeof *etags);
    remote_buf xml = {.max = 1 << 20};
    char *done = NULL;
    char upload_id[1024], enc_id[3200] = "", query[3300];
    bool created = false;
    ct_status st = CT_OK;
    if (!etags) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", t->disp);
        goto fail;
    }

    remote_req cr = {.method = "POST", .query = "uploads=", .out = &xml, .fd = -1};
    snprintf(t->disp, sizeof t->disp, "%.470s (CreateMultipartUpload)", base_disp);
    st = remote_run(t, &cr, o);
    snprintf(t->disp, sizeof t->disp, "%s", base_disp);
    if (st) goto fail;
    if (!remote_xml_text(xml.data, "UploadId", upload_id, sizeof upload_id) || !upload_id[0] ||
        !s3_encode(enc_id, sizeof enc_id, upload_id, false)) {
        st = CT_ERR(CT_ERR_IO, "%s: CreateMultipartUpload answered no UploadId", t->disp);
        goto fail;
    }
    created = true;

    for (int64_t i = 0; i < nparts; i++) {
        int64_t off = i * part, n = size - off < part ? size - off : part;
        snprintf(query, sizeof query, "partNumber=%" PRId64 "&uploadId=%s", i + 1, enc_id);
        snprintf(t->disp, sizeof t->disp, "%.460s (part %" PRId64 " of %" PRId64 ")", base_disp, i + 1,
                 nparts);
        remote_req pr = {.method = "PUT", .query = query, .fd = fd, .body_off = off, .body_len = n};
        st = remote_run(t, &pr, o);
        snprintf(t->disp, sizeof t->disp, "%s", base_disp);
        if (st) goto fail;
        if (!pr.etag[0]) {
            st = CT_ERR(CT_ERR_IO, "%s: UploadPart %" PRId64 " answered no ETag", t->disp, i + 1);
            goto fail;
        }
        snprintf(etags[i], sizeof etags[i], "%s", pr.etag);
    }

    size_t cap = (size_t)nparts * (sizeof etags[0] * 5 + 64) + 128, len = 0;
    done = malloc(cap);
    if (!done) {
        st = CT_ERR(CT_ERR_OOM, "%s: out of memory", t->disp);
        goto fail;
    }
    len = (size_t)snprintf(done, cap, "<CompleteMultipartUpload>");
    for (int64_t i = 0; i < nparts; i++) {
        len += (size_t)snprintf(done + len, cap - len, "<Part><PartNumber>%" PRId64
                                "</PartNumber><ETag>", i + 1);
        s3_xml_escape(done, cap, &len, etags[i]);
        len += (size_t)snprintf(done + len, cap - len, "</ETag></Part>");
    }
    len += (size_t)snprintf(done + len, cap - len, "</CompleteMultipartUpload>");
    snprintf(query, sizeof query, "uploadId=%s", enc_id);
    remote_req cq = {.method = "POST", .query = query, .body = (const uint8_t *)done,
                     .body_len = (int64_t)len, .out = &xml, .fd = -1, .body_errors = true};
    snprintf(t->disp, sizeof t->disp, "%.470s (CompleteMultipartUpload)", base_disp);
    st = remote_run(t, &cq, o);
    snprintf(t->disp, sizeof t->disp, "%s", base_disp);
    if (st) goto fail;
    free(done);
    free(xml.data);
    free(etags);
    return CT_OK;
fail:
    if (created) { /* best effort: the parts would otherwise be kept (and billed) */
        snprintf(query, sizeof query, "uploadId=%s", enc_id);
        ct_remote_opts once = o ? *o : ct_remote_opts_default();
        once.retries = 1;
        remote_req ab = {.method = "DELETE", .query = query, .fd = -1, .quiet = true};
        remote_run(t, &ab, &once);
    }
    free(done);
    free(xml.data);
    free(etags);
    return st;
}
