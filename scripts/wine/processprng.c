/* Test-only stand-in for bcryptprimitives.dll under Wine 8, which lacks
 * ProcessPrng; Rust's standard library on Windows imports it for random
 * numbers (HashMap seeds). Placed beside the .exe by scripts/wine-test and
 * never shipped: real Windows 10 and later have ProcessPrng.
 * It fills the buffer from RtlGenRandom (advapi32 SystemFunction036). */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
