/* Prints each rank, its host and the training variables skiff derived from
 * the MPI launcher. Build: mpicc -o hello_mpi hello_mpi.c */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    const char *r = getenv("RANK"), *lr = getenv("LOCAL_RANK");
    printf("rank %d/%d on %s (RANK=%s LOCAL_RANK=%s)\n", rank, size, host, r ? r : "-", lr ? lr : "-");
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("allreduce of ranks: %d (expected %d)\n", sum, size * (size - 1) / 2);
    MPI_Finalize();
    return 0;
}
