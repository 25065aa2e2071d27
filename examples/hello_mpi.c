/* One line per rank: MPI's view (rank, size, rank on the node, host), the
 * training variables skiff set for the task (RANK, WORLD_SIZE, LOCAL_RANK),
 * and the sum of all ranks by MPI_Allreduce with the value it must have.
 * Exits 1 on a rank whose variables disagree with MPI or whose sum is wrong,
 * so a launcher reports the failure. Build: mpicc -o hello_mpi hello_mpi.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v ? v : dflt;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, local, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm node;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Get_processor_name(host, &len);
    long mine = rank, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long want = (long)size * (size - 1) / 2;

    const char *r = env_or("RANK", "-"), *ws = env_or("WORLD_SIZE", "-"), *lr = env_or("LOCAL_RANK", "-");
    char mr[16], ms[16], ml[16];
    snprintf(mr, sizeof(mr), "%d", rank);
    snprintf(ms, sizeof(ms), "%d", size);
    snprintf(ml, sizeof(ml), "%d", local);
    int agree = !strcmp(r, mr) && !strcmp(ws, ms) && !strcmp(lr, ml);
    printf("rank %d/%d local %d on %s: allreduce %ld (want %ld) RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s %s\n", rank, size,
           local, host, sum, want, r, ws, lr, agree && sum == want ? "ok" : "MISMATCH");
    fflush(stdout);
    MPI_Comm_free(&node);
    MPI_Finalize();
    return agree && sum == want ? 0 : 1;
}
