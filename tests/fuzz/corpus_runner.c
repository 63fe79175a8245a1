/* Replays fuzz inputs through LLVMFuzzerTestOneInput without libFuzzer, so committed
 * corpora (valid seeds, malformed files, past crashers) run as an ordinary regression test
 * with gcc or clang, sanitizers or not.
 *
 * Usage: corpus_runner PATH...   (each PATH a file or a directory of files, not recursive)
 * Each input is copied into a heap block of exactly its size, so a sanitizer build catches
 * any read past the end. Exits non-zero if no input was found (a misconfigured path should
 * not pass silently); a failing input aborts inside the target. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "corpus_runner: cannot open %s\n", path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(fp), &st) != 0) {
        fclose(fp);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size ? size : 1);
    if (!data || fread(data, 1, size, fp) != size) {
        fprintf(stderr, "corpus_runner: cannot read %s\n", path);
        free(data);
        fclose(fp);
        return -1;
    }
    fclose(fp);
    printf("corpus_runner: %s (%zu bytes)\n", path, size); /* names the culprit if it aborts */
    fflush(stdout);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 0;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file in dir, in name order (stable logs). Returns the number run, -1 on error. */
static int run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (run_file(path) != 0)
                ran = -1;
            else if (ran >= 0)
                ran++;
        }
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "corpus_runner: no such path %s\n", argv[i]);
            return 1;
        }
        int n = S_ISDIR(st.st_mode) ? run_dir(argv[i]) : (run_file(argv[i]) == 0 ? 1 : -1);
        if (n < 0) return 1;
        total += n;
    }
    printf("corpus_runner: %d inputs OK\n", total);
    return total > 0 ? 0 : 1;
}
