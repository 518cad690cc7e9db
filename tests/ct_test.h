/*
 * Minimal test helpers: CHECK records a failure and continues; the test's
 * main returns ct_test_result(), non-zero when any check failed.
 */
#ifndef CT_TEST_H
#define CT_TEST_H
#include <math.h>
#include <stdio.h>

static int ct_test_failures = 0;
static int ct_test_checks = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        ct_test_checks++;                                                        \
        if (!(cond)) {                                                           \
            ct_test_failures++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)
#define CHECK_MSG(cond, ...)                                                     \
    do {                                                                         \
        ct_test_checks++;                                                        \
        if (!(cond)) {                                                           \
            ct_test_failures++;                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
        }                                                                        \
    } while (0)

static inline int ct_test_result(const char *name) {
    printf("%s: %d checks, %d failed\n", name, ct_test_checks, ct_test_failures);
    return ct_test_failures ? 1 : 0;
}
#endif
