/*
 * `ctrain prepare --out s3://...` (or an http(s) URL that takes PUT): the
 * shards a local prepare wrote, uploaded one by one (large ones as multipart
 * uploads), each followed by its sidecar when the manifest names one
 * (--format sft), and the manifest last, so a reader that finds the manifest
 * finds every file it lists.
 * Leaves out: preparing (prepare.c), the transport (remote.c).
 */
#include "data/prepare/prepare.h"

#include "ctrain/config.h" /* CT_PATH_MAX */
#include "data/shard/remote.h"
#include "io/fileio.h"

#include <cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ct_status ct_prepare_upload(const char *dir, const char *url, bool overwrite,
                            const ct_remote_opts *net, int64_t *bytes_out) {
    char base[CT_PATH_MAX], murl[CT_PATH_MAX + 16], disp[CT_PATH_MAX], path[CT_PATH_MAX + 300];
    size_t ul = strlen(url);
    if (ul + 2 > sizeof base) return CT_ERR(CT_ERR_ARG, "--out: URL too long");
    snprintf(base, sizeof base, "%s%s", url, ul && url[ul - 1] == '/' ? "" : "/");
    snprintf(murl, sizeof murl, "%smanifest.json", base);
    ct_remote_display(murl, disp, sizeof disp);
    *bytes_out = 0;
    /* a dataset already there is replaced only when asked, as on disk */
    int64_t size;
    ct_status st = ct_remote_size(murl, &size, net);
    if (st == CT_OK && !overwrite) {
        st = CT_ERR(CT_ERR_IO, "%s already exists: --out holds a prepared dataset", disp);
        ct_error_hint("pass --overwrite to replace it, or choose another --out");
        return st;
    }
    ct_error_clear();
    cJSON *m = NULL;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if ((st = ct_json_read_object(path, &m))) return st;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(m, "shards"), *e;
    cJSON_ArrayForEach(e, shards) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file");
        if (!cJSON_IsString(f)) continue;
        char surl[CT_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, f->valuestring);
        snprintf(surl, sizeof surl, "%s%s", base, f->valuestring);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        if ((st = ct_remote_put_file(surl, path, 0, net))) break;
        if (cJSON_IsNumber(b)) *bytes_out += (int64_t)b->valuedouble;
        /* prepare --format sft: the shard's loss-mask sidecar beside it */
        const cJSON *side = cJSON_GetObjectItemCaseSensitive(e, "sidecar");
        const cJSON *sf = cJSON_GetObjectItemCaseSensitive(side, "file");
        if (!cJSON_IsString(sf)) continue;
        if (strchr(sf->valuestring, '/')) {
            st = CT_ERR(CT_ERR_FORMAT, "%s/manifest.json: shards[].sidecar.file \"%s\" is not a plain file name",
                        dir, sf->valuestring);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, sf->valuestring);
        snprintf(surl, sizeof surl, "%s%s", base, sf->valuestring);
        if ((st = ct_remote_put_file(surl, path, 0, net))) break;
        b = cJSON_GetObjectItemCaseSensitive(side, "bytes");
        if (cJSON_IsNumber(b)) *bytes_out += (int64_t)b->valuedouble;
    }
    cJSON_Delete(m);
    if (st) {
        ct_error_hint("the manifest was not uploaded, so readers do not see this dataset; run "
                      "prepare again (with --overwrite if an older dataset is there)");
        return st;
    }
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    return ct_remote_put_file(murl, path, 0, net);
}
