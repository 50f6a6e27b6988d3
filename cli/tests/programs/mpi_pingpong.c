/* Two MPI ranks: a ping-pong of a 4 KiB message (every byte checked), then an allreduce.
 * Prints one line per check and "OK" from rank 0 when everything matched; exits non-zero
 * otherwise. Built with mpicc by cli/tests/mpi_programs.rs. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define LEN 4096
#define ROUNDS 50

int main(int argc, char **argv)
{
    int rank, size, i, r, bad = 0;
    static unsigned char buf[LEN];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "needs 2 ranks, got %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (r = 0; r < ROUNDS; r++) {
        if (rank == 0) {
            for (i = 0; i < LEN; i++)
                buf[i] = (unsigned char)(i * 7 + r);
            MPI_Send(buf, LEN, MPI_BYTE, 1, r, MPI_COMM_WORLD);
            MPI_Recv(buf, LEN, MPI_BYTE, 1, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (i = 0; i < LEN; i++)
                bad += buf[i] != (unsigned char)(i * 7 + r + 1);
        } else {
            MPI_Recv(buf, LEN, MPI_BYTE, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (i = 0; i < LEN; i++)
                buf[i]++;
            MPI_Send(buf, LEN, MPI_BYTE, 0, r, MPI_COMM_WORLD);
        }
    }
    if (rank == 0)
        printf("pingpong: %d rounds of %d bytes, %d bad bytes\n", ROUNDS, LEN, bad);

    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("rank %d: allreduce sum %ld\n", rank, sum);
    bad += sum != 3;

    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && bad == 0)
        printf("OK\n");
    MPI_Finalize();
    return bad != 0;
}
