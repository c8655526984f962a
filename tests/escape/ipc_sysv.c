/* SysV IPC shared with the host: the test created a shared memory
 * segment, a message queue and a semaphore set with known keys.  The IPC
 * namespace must hide them.  argv[1..3]: shm, msg and sem keys. */
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include "escape.h"

int main(int argc, char **argv)
{
	if (argc < 4)
		ESCAPED("usage: ipc_sysv SHMKEY MSGKEY SEMKEY (test bug)");
	key_t shm = (key_t)strtol(argv[1], NULL, 0), msg = (key_t)strtol(argv[2], NULL, 0),
	      sem = (key_t)strtol(argv[3], NULL, 0);
	int id = shmget(shm, 0, 0);
	if (id >= 0) {
		char *p = shmat(id, NULL, 0);
		ESCAPED("found the host's shm segment %#x (%.16s)", shm, p != (void *)-1 ? p : "");
	}
	NOTE("shmget: %s", ename(errno));
	must_fail("msgget(host key)", msgget(msg, 0));
	must_fail("semget(host key)", semget(sem, 0, 0));
	/* Ids are small integers: guess them. */
	for (int i = 0; i < 64; i++) {
		struct shmid_ds ds;
		if (shmctl(i, IPC_STAT, &ds) == 0)
			ESCAPED("shmctl(%d) sees a segment of key %#x", i, ds.shm_perm.__key);
		if (shmat(i, NULL, SHM_RDONLY) != (void *)-1)
			ESCAPED("attached shm id %d", i);
	}
	for (int i = 0; i < 4096; i += 1) {
		struct shmid_ds ds;
		if (shmctl(i, SHM_STAT, &ds) >= 0)
			ESCAPED("SHM_STAT index %d sees key %#x", i, ds.shm_perm.__key);
	}
	struct shm_info si = { 0 };
	if (shmctl(0, SHM_INFO, (struct shmid_ds *)&si) > 0 || si.used_ids)
		ESCAPED("SHM_INFO counts %d segments", si.used_ids);
	BLOCKED("the host's SysV objects are invisible");
}
