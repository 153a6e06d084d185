# The TensorFlow code of seed 000 ("Automatic Parallelism", d2l), verbatim, in its order.
# tests/test_seed.py runs it on a CPU-only machine with two lines changed.
from d2l import tensorflow as d2l
import tensorflow as tf

devices = tf.config.list_logical_devices('GPU')

@tf.function
def run(x):
    return [tf.linalg.matmul(x, x) for _ in range(50)]

with tf.device(devices[0].name):
    x_gpu1 = tf.random.normal(shape=(4000, 4000))
with tf.device(devices[1].name):
    x_gpu2 = tf.random.normal(shape=(4000, 4000))

# Warm-up: trigger tf.function tracing and CUDA kernel loading on both GPUs
run(x_gpu1)[-1].numpy()
run(x_gpu2)[-1].numpy()

with d2l.Benchmark('GPU1 time'):
    run(x_gpu1)[-1].numpy()

with d2l.Benchmark('GPU2 time'):
    run(x_gpu2)[-1].numpy()

with d2l.Benchmark('GPU1 & GPU2'):
    run(x_gpu1)
    run(x_gpu2)[-1].numpy()

def copy_to_cpu(x):
    with tf.device('/CPU:0'):
        return [tf.identity(t) for t in x]

with d2l.Benchmark('Run on GPU1'):
    y = run(x_gpu1)
    y[-1].numpy()  # Sync GPU

with d2l.Benchmark('Copy to CPU'):
    y_cpu = copy_to_cpu(y)
    y_cpu[-1].numpy()  # Sync transfer

with d2l.Benchmark('Run on GPU1 and copy to CPU'):
    y = run(x_gpu1)
    y_cpu = copy_to_cpu(y)
    y_cpu[-1].numpy()
