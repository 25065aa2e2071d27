#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry.h"

/* Which token servers may get the credentials held for an endpoint. */
Test(registry, realm_same_host)
{
    /* the endpoint's host, any port, either scheme */
    cr_assert(skiff_registry_realm_same_host("reg.example.com", "https://reg.example.com/token"));
    cr_assert(skiff_registry_realm_same_host("reg.example.com:5000", "https://reg.example.com:5001/auth"));
    cr_assert(skiff_registry_realm_same_host("REG.example.com:5000", "https://reg.EXAMPLE.com/auth?x=1"));
    cr_assert(skiff_registry_realm_same_host("127.0.0.1:5000", "http://127.0.0.1:5001/token"));
    cr_assert(skiff_registry_realm_same_host("[::1]:5000", "http://[::1]:5001/token"));
    cr_assert(skiff_registry_realm_same_host("[::1]", "http://[::1]/token"));
    /* Docker Hub's token server, pinned */
    cr_assert(skiff_registry_realm_same_host("registry-1.docker.io", "https://auth.docker.io/token"));
    cr_assert(skiff_registry_realm_same_host("registry-1.docker.io", "https://auth.docker.io:443/token"));
    cr_assert_not(skiff_registry_realm_same_host("registry-1.docker.io", "http://auth.docker.io/token"));
    cr_assert_not(skiff_registry_realm_same_host("registry-1.docker.io", "https://auth.docker.io:8443/token"));
    cr_assert_not(skiff_registry_realm_same_host("mirror.example.com", "https://auth.docker.io/token"));
    /* other hosts, look-alikes and tricks */
    cr_assert_not(skiff_registry_realm_same_host("127.0.0.1:5000", "http://localhost:5000/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://auth.example.com/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://reg.example.com.evil.net/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://evil.net/reg.example.com"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://reg.example.com@evil.net/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "https://u:p@reg.example.com/token"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", "not a url"));
    cr_assert_not(skiff_registry_realm_same_host("reg.example.com", ""));
    cr_assert_not(skiff_registry_realm_same_host("[::1]:5000", "http://127.0.0.1:5000/token"));
}

/* A mirror is looked up under its own host: the image registry's entry never
 * matches it (a port-less entry is for every port of that host). */
Test(registry, credentials_per_endpoint_host)
{
    char p[] = "/tmp/skiff-test-creds.XXXXXX";
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("machine reg.example.com:5000 login alice password pw-reg\n"
          "machine mirror.example.com login m password pw-mirror\n",
          f);
    fclose(f);
    char l[64], pw[64];
    skiff_err err;
    cr_assert_eq(skiff_credentials_lookup(p, "reg.example.com:5000", "", l, sizeof(l), pw, sizeof(pw), &err), 1);
    cr_assert_str_eq(pw, "pw-reg");
    cr_assert_eq(skiff_credentials_lookup(p, "reg.example.com:6000", "", l, sizeof(l), pw, sizeof(pw), &err), 0);
    cr_assert_eq(skiff_credentials_lookup(p, "reg.example.com", "", l, sizeof(l), pw, sizeof(pw), &err), 0);
    cr_assert_eq(skiff_credentials_lookup(p, "mirror.example.com:5000", "", l, sizeof(l), pw, sizeof(pw), &err), 1);
    cr_assert_str_eq(pw, "pw-mirror");
    cr_assert_eq(skiff_credentials_lookup(p, "auth.example.com", "", l, sizeof(l), pw, sizeof(pw), &err), 0);
    unlink(p);
}
