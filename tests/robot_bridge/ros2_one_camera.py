"""The robot of tests/robot_bridge/test_robot_start_check.py: ros2_camera.py with its raw 64 x 64
rgb8 camera on /camera/image_raw and no other camera, at 20 Hz, until the test closes stdin.
Run with a side venv's python (.venv-ros-jazzy); prints "robot up" once publishing."""

from ros2_camera import main  # this script's folder is the first entry of sys.path

if __name__ == "__main__":
    main(["--hz", "20", "--seconds", "120", "--until-stdin-closes", "--ready", "robot up", "--node", "one_camera_robot"])
