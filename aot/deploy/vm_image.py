"""The qemu-rpi4 image: Debian's arm64 kernel and a small initramfs (busybox,
OpenSSH's sshd with its built-in SFTP server) that boots under
qemu-system-aarch64 into an SSH server aot reaches like a real Raspberry Pi 4.

Why sshd and not dropbear: Debian 12's dropbear (2022.83) now and then
closes a new channel before running its command, or dies on an assertion
(mkj/dropbear#173, #321; fixed upstream in 2024.86): about one SSH session
in six failed that way under the emulator.

Everything comes from Debian arm64 packages fetched with `apt-get download`
(needs `dpkg --add-architecture arm64` and `apt-get update`, which
scripts/setup.sh does). The build writes, into a cache directory
($AOT_CACHE_DIR or ~/.cache/aot, subdirectory vm/qemu-rpi4-<version>), each
file 0600 in a 0700 directory from its creation on (initrd.gz holds the
guest's private host key):

    Image            the kernel (uncompressed arm64 Image)
    initrd.gz        the initramfs (cpio newc, gzip; fixed owners and times)
    client_key       the private key aot logs in with (its public half is
                     the guest's /root/.ssh/authorized_keys)
    host_key.pub     the guest's fixed host key, checked on every connection
    image.json       what went in (kernel, packages) and how long it took

The version is a hash of this file, so the image is rebuilt exactly when the
builder changes. Keys are made once per build; package files and the cpio
archive are laid out in a fixed order with fixed owners and times.

    python -m aot.deploy.vm_image [--force]     # build (no-op when current)
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from aot.deploy.private_files import private_dir, write_private
from aot.errors import AotError
from aot.support.fsutil import write_dir_atomically

IMAGE_NAME = "qemu-rpi4"
CACHE_ENV = "AOT_CACHE_DIR"
ARCH = "arm64"
KERNEL_META_PACKAGE = "linux-image-arm64"
# Userland: busybox for the shell and tools, sshd, and the shared libraries
# sshd links (only those it loads are kept: see keep_needed_libraries).
PACKAGES = ("busybox-static", "openssh-server", "libc6", "libgcc-s1", "libcrypt1", "zlib1g",
            "libwrap0", "libnsl2", "libtirpc3", "libaudit1", "libcap-ng0", "libpam0g",
            "libsystemd0", "libcap2", "libgcrypt20", "libgpg-error0", "liblz4-1", "liblzma5",
            "libzstd1", "libselinux1", "libpcre2-8-0", "libgssapi-krb5-2", "libkrb5-3",
            "libk5crypto3", "libkrb5support0", "libkeyutils1", "libcom-err2", "libssl3")
# The programs the guest runs from the packages; their libraries are kept.
PROGRAMS = ("usr/sbin/sshd",)
LIB_DIRS = ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu")
# Modules /init loads (the kernel builds virtio-pci and virtio-net as
# modules); their dependencies are found in the modules' own .modinfo.
MODULES = ("virtio_pci", "virtio_net")
# Where the kernel package keeps the modules the above may need.
MODULE_DIRS = ("kernel/drivers/virtio/", "kernel/drivers/net/", "kernel/net/core/")
# Left out of the initramfs: documentation, service files, the other
# OpenSSH programs.
DROPPED = ("usr/share", "etc/ld.so.conf.d", "etc/init.d", "etc/default", "etc/pam.d",
           "etc/ufw", "etc/network", "lib/systemd", "usr/lib/systemd", "usr/bin", "var")
HOST_KEY = "etc/ssh/ssh_host_ed25519_key"
# The guest's address on QEMU's user network, and its gateway.
GUEST_IP, GATEWAY = "10.0.2.15/24", "10.0.2.2"
# A fixed timestamp for every archive member (deterministic archives).
EPOCH = 1_600_000_000

INIT = f"""#!/bin/sh
# aot's qemu-rpi4 init: mount, network, then busybox init runs sshd.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
busybox mount -t proc proc /proc
busybox mount -t sysfs sys /sys
busybox mount -t devtmpfs dev /dev
busybox mkdir -p /dev/pts
busybox mount -t devpts devpts /dev/pts
busybox mount -t tmpfs -o mode=1777 tmp /tmp
busybox --install -s
hostname {IMAGE_NAME}
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m.ko; done
# The PCI probe may finish after insmod returns.
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
ip link set lo up
ip addr add {GUEST_IP} dev eth0
ip link set eth0 up
ip route add default via {GATEWAY}
echo "aot: network up"
exec busybox init
"""

# busybox init reaps orphans and restarts sshd should it exit. sshd: in the
# foreground, logging to the console (-e), serving each connection from a
# fork rather than a fresh exec (-r: loading its 20 libraries again costs
# the emulated CPU about half a second per connection).
INITTAB = """::respawn:/usr/sbin/sshd -D -e -r
::shutdown:/bin/umount -a -r
"""

# Keys only, root allowed, SFTP inside sshd, nothing forwarded.
SSHD_CONFIG = f"""Port 22
HostKey /{HOST_KEY}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
AllowTcpForwarding no
X11Forwarding no
PrintMotd no
PidFile /run/sshd.pid
Subsystem sftp internal-sftp
"""

# sshd's privilege separation runs as user sshd in /run/sshd.
ETC_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n"
                  "sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n",
    "etc/shadow": "root:*:19000:0:99999:7:::\nsshd:*:19000:0:99999:7:::\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    "etc/shells": "/bin/sh\n",
    "etc/inittab": INITTAB,
    "etc/ssh/sshd_config": SSHD_CONFIG,
}


@dataclass(frozen=True)
class Image:
    """A built image in the cache."""
    dir: Path

    @property
    def kernel(self) -> Path:
        return self.dir / "Image"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.gz"

    @property
    def client_key(self) -> Path:
        return self.dir / "client_key"

    @property
    def host_key_pub(self) -> Path:
        return self.dir / "host_key.pub"

    def host_key(self) -> str:
        """The host key as known_hosts wants it: 'ssh-ed25519 AAAA...'."""
        return " ".join(self.host_key_pub.read_text().split()[:2])


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "aot")


def image_version() -> str:
    """A hash of this builder: a changed builder makes a new image."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def image_dir() -> Path:
    return cache_root() / "vm" / f"{IMAGE_NAME}-{image_version()}"


def build_command() -> str:
    return "make setup (or: python -m aot.deploy.vm_image)"


def find_image() -> Image:
    """The current image, or a clear error saying how to build it."""
    image = Image(image_dir())
    if not (image.dir / "image.json").is_file():
        raise AotError(f"the {IMAGE_NAME} image is not built ({image.dir} is missing): "
                       f"run {build_command()}")
    return image


# --- building ---------------------------------------------------------------------

def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, check=True, capture_output=True, **kw)
    except FileNotFoundError:
        raise AotError(f"building the {IMAGE_NAME} image needs {cmd[0]} "
                       "(run scripts/setup.sh)") from None
    except subprocess.CalledProcessError as e:
        err = (e.stderr or b"").decode(errors="replace").strip().splitlines()
        raise AotError(f"building the {IMAGE_NAME} image: {' '.join(cmd[:3])} failed: "
                       f"{err[-1] if err else 'exit ' + str(e.returncode)}") from None


def kernel_package() -> str:
    """The versioned kernel package the meta package points at."""
    out = _run(["apt-cache", "depends", f"{KERNEL_META_PACKAGE}:{ARCH}"]).stdout.decode()
    for line in out.splitlines():
        dep = line.strip().removeprefix("Depends:").strip()
        if line.strip().startswith("Depends:") and dep.startswith("linux-image-"):
            return dep.split(":")[0]
    raise AotError(f"apt knows no {KERNEL_META_PACKAGE}:{ARCH}: run `dpkg --add-architecture "
                   f"{ARCH} && apt-get update` (scripts/setup.sh does)")


def download(packages: list[str], dest: Path) -> dict[str, Path]:
    """The packages' arm64 .debs, fetched into dest."""
    _run(["apt-get", "download", "-q", *(f"{p}:{ARCH}" for p in packages)], cwd=dest)
    debs = {}
    for p in packages:
        found = sorted(dest.glob(f"{p}_*_{ARCH}.deb"))
        if not found:
            raise AotError(f"apt-get download fetched no {p}:{ARCH}")
        debs[p] = found[-1]
    return debs


def _fsys_tar(deb: Path) -> subprocess.Popen:
    try:
        return subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)],
                                stdout=subprocess.PIPE)
    except FileNotFoundError:
        raise AotError("building the image needs dpkg-deb (a Debian system)") from None


def kernel_files(deb: Path) -> tuple[bytes, dict[str, bytes]]:
    """The kernel Image and the candidate modules (by module name) from the
    kernel package, read in one pass over its data archive."""
    image, modules = None, {}
    proc = _fsys_tar(deb)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for m in tar:
            name = m.name.removeprefix("./")
            if not m.isfile():
                continue
            if name.startswith("boot/vmlinuz-"):
                image = tar.extractfile(m).read()
            elif name.endswith(".ko") and "/kernel/" in name:
                rel = name[name.index("/kernel/") + 1:]
                if rel.startswith(MODULE_DIRS) and rel.count("/") <= 3:
                    modules[Path(rel).stem] = tar.extractfile(m).read()
    if proc.wait() != 0 or image is None:
        raise AotError(f"{deb.name}: no kernel image in the package")
    return image, modules


def module_depends(ko: bytes) -> list[str]:
    """A module's dependencies, from the `depends=` string in its .modinfo."""
    at = ko.find(b"\0depends=")
    if at < 0:
        return []
    value = ko[at + len(b"\0depends="):ko.index(b"\0", at + 1)].decode()
    return [d.replace("-", "_") for d in value.split(",") if d]


def module_file(name: str, modules: dict[str, bytes]) -> str | None:
    """The kernel package's key for module `name`: modinfo names use `_`
    where some file names use `-`."""
    for key in (name, name.replace("_", "-")):
        if key in modules:
            return key
    return None


def module_order(wanted: tuple[str, ...], modules: dict[str, bytes]) -> list[str]:
    """Wanted modules and what they need, dependencies first."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in order:
            return
        if name in path:
            raise AotError(f"kernel modules depend on each other in a circle: {name}")
        key = module_file(name, modules)
        if key is None:
            raise AotError(f"kernel module {name} is not in the kernel package's "
                           f"{', '.join(MODULE_DIRS)}")
        for dep in module_depends(modules[key]):
            visit(dep, (*path, name))
        order.append(name)

    for w in wanted:
        visit(w, ())
    return order


def unpack(debs: list[Path], root: Path) -> None:
    for deb in debs:
        _run(["dpkg-deb", "-x", str(deb), str(root)])
    for rel in DROPPED:
        shutil.rmtree(root / rel, ignore_errors=True)


def needed(elf: Path) -> list[str]:
    """The shared libraries an ELF file names (DT_NEEDED), by readelf."""
    out = _run(["readelf", "-d", str(elf)]).stdout.decode()
    return [line.split("[", 1)[1].split("]", 1)[0] for line in out.splitlines()
            if "(NEEDED)" in line]


def keep_needed_libraries(root: Path) -> None:
    """Remove the libraries no program of PROGRAMS loads (directly or through
    another library); a library they need that is missing is an error."""
    files = {}
    for d in LIB_DIRS:
        for p in sorted((root / d).glob("*.so*")) if (root / d).is_dir() else ():
            files.setdefault(p.name, p)
    keep, todo = set(), [root / p for p in PROGRAMS]
    while todo:
        for so in needed(todo.pop()):
            if so in keep or so.startswith("ld-linux"):
                continue
            if so not in files:
                raise AotError(f"the {IMAGE_NAME} image lacks {so} (add its package to "
                               "vm_image.PACKAGES)")
            keep.add(so)
            todo.append(files[so].resolve())
    # A kept soname link keeps the file it points at.
    keep |= {files[so].resolve().name for so in keep}
    for name, p in files.items():
        if name not in keep and not name.startswith("ld-linux"):
            p.unlink()
    for d in LIB_DIRS:
        for sub in sorted((root / d).iterdir()) if (root / d).is_dir() else ():
            if sub.is_dir() and not sub.is_symlink():
                shutil.rmtree(sub)


def make_host_key(root: Path) -> str:
    """Generate the guest's host key; returns its public line."""
    private, public = make_key_pair(IMAGE_NAME)
    key = root / HOST_KEY
    key.parent.mkdir(parents=True, exist_ok=True)
    write_private(key, private)
    return public.decode()


def make_key_pair(comment: str) -> tuple[bytes, bytes]:
    """A fresh ed25519 key pair: (private in OpenSSH format, public line)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return private, public + f" {comment}\n".encode()


def populate(root: Path, modules: dict[str, bytes], authorized_key: bytes) -> list[str]:
    """The initramfs tree around the unpacked packages; returns the module order."""
    for d in ("proc", "sys", "dev", "tmp", "run/sshd", "root/.ssh", "sbin", "usr/sbin",
              "usr/bin", "lib/modules", "var/log", "etc/ssh"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "root").chmod(0o700)
    (root / "root/.ssh").chmod(0o700)
    (root / "root/.ssh/authorized_keys").write_bytes(authorized_key)
    (root / "root/.ssh/authorized_keys").chmod(0o600)
    for rel, text in ETC_FILES.items():
        (root / rel).write_text(text)
    (root / "etc/shadow").chmod(0o600)
    (root / "bin/sh").symlink_to("busybox")
    order = module_order(MODULES, modules)
    for name in order:
        (root / "lib/modules" / f"{name}.ko").write_bytes(modules[module_file(name, modules)])
    (root / "lib/modules/order").write_text(" ".join(order) + "\n")
    (root / "init").write_text(INIT)
    (root / "init").chmod(0o755)
    return order


def _newc(name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0),
          ino: int = 0) -> bytes:
    fields = (ino, mode, 0, 0, 1, EPOCH, len(data), 0, 0, rdev[0], rdev[1],
              len(name) + 1, 0)
    head = b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
    pad = b"\0" * (-len(head) % 4)
    return head + pad + data + b"\0" * (-len(data) % 4)


def cpio_newc(root: Path) -> bytes:
    """The tree as a cpio newc archive: sorted, owned by root, fixed times,
    plus /dev/console (the kernel opens it before /init runs)."""
    out = io.BytesIO()
    entries = sorted([p.relative_to(root).as_posix() for p in root.rglob("*")] + ["dev/console"])
    ino = 1
    for rel in entries:
        if rel == "dev/console":
            out.write(_newc(rel, stat.S_IFCHR | 0o600, rdev=(5, 1), ino=ino))
            ino += 1
            continue
        p = root / rel
        st = p.lstat()
        perm = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            out.write(_newc(rel, stat.S_IFLNK | 0o777, os.readlink(p).encode(), ino=ino))
        elif stat.S_ISDIR(st.st_mode):
            out.write(_newc(rel, stat.S_IFDIR | perm, ino=ino))
        elif stat.S_ISREG(st.st_mode):
            out.write(_newc(rel, stat.S_IFREG | perm, p.read_bytes(), ino=ino))
        else:
            raise AotError(f"initramfs: {rel} is neither a file, a directory nor a link")
        ino += 1
    out.write(_newc("TRAILER!!!", 0))
    return out.getvalue()


def build_image(force: bool = False) -> Image:
    """Build the current image into the cache (nothing to do when it is there)."""
    target = image_dir()
    if (target / "image.json").is_file() and not force:
        return Image(target)
    t0 = time.monotonic()

    def fill(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="aot-vm-image-") as tmp:
            work = Path(tmp)
            (work / "debs").mkdir()
            kpkg = kernel_package()
            debs = download([kpkg, *PACKAGES], work / "debs")
            image, modules = kernel_files(debs[kpkg])
            root = work / "root"
            unpack([debs[p] for p in PACKAGES], root)
            keep_needed_libraries(root)
            host_pub = make_host_key(root)
            private, public = make_key_pair("aot")
            order = populate(root, modules, public)
            initrd = gzip.compress(cpio_newc(root), compresslevel=6, mtime=0)
            info = {"name": IMAGE_NAME, "version": image_version(),
                    "kernel_package": kpkg, "packages": sorted(d.name for d in debs.values()),
                    "modules": order, "kernel_bytes": len(image), "initrd_bytes": len(initrd),
                    "build_seconds": round(time.monotonic() - t0, 2)}
            # initrd.gz holds the guest's private host key, client_key is
            # aot's login: every file 0600 (private_files), the dir 0700.
            for name, data in (("Image", image), ("initrd.gz", initrd), ("client_key", private),
                               ("client_key.pub", public), ("host_key.pub", host_pub.encode()),
                               ("image.json", (json.dumps(info, indent=1, sort_keys=True)
                                               + "\n").encode())):
                write_private(out / name, data)

    private_dir(target.parent)
    write_dir_atomically(target, fill, force=True, private=True)
    _drop_old_images(target)
    return Image(target)


def _drop_old_images(current: Path) -> None:
    """Images of older builders are never used again: remove them."""
    for old in current.parent.glob(f"{IMAGE_NAME}-*"):
        if old != current and old.is_dir() and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aot.deploy.vm_image",
                                 description=f"build the {IMAGE_NAME} VM image into the cache")
    ap.add_argument("--force", action="store_true", help="rebuild even when current")
    args = ap.parse_args(argv)
    try:
        existed = (image_dir() / "image.json").is_file()
        image = build_image(force=args.force)
    except AotError as e:
        print(f"aot: error: {e}", file=sys.stderr)
        return 2
    info = json.loads((image.dir / "image.json").read_text())
    what = "up to date" if existed and not args.force else \
        f"built in {info['build_seconds']} s"
    print(f"{IMAGE_NAME} image {what}: {image.dir} (kernel {info['kernel_bytes']} bytes, "
          f"initramfs {info['initrd_bytes']} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
